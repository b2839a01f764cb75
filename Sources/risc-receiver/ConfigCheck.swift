import ArgumentParser
import Foundation
import RISCServer

struct Config: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Configuration tools.", subcommands: [ConfigCheck.self, ConfigVariablesTable.self])
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

/// The README's table of variables comes from here, so it cannot drift from what the binary reads.
struct ConfigVariablesTable: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "variables", abstract: "Print every configuration variable, its default and meaning (a Markdown table).")

    func run() async throws {
        print(ConfigVariables.markdownTable, terminator: "")
    }
}
