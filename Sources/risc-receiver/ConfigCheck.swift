import ArgumentParser
import Foundation
import RISCServer

struct Config: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Configuration tools.", subcommands: [ConfigCheck.self])
}

struct ConfigCheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Validate the environment (and --config FILE) and print the effective configuration, secrets redacted.",
        discussion: "Exits 0 when `serve` would start with it, 2 with one line naming the variable otherwise.")

    @OptionGroup var config: ConfigFileOption

    func run() async throws {
        let configuration = try await Bootstrap.configuration(file: config.file) { reader throws(ServiceConfiguration.Invalid) in
            try ServiceConfiguration(reader: reader)
        }
        for (variable, value) in configuration.redactedSummary {
            print("\(variable)=\(value)")
        }
    }
}
