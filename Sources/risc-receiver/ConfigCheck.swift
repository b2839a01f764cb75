import ArgumentParser
import Foundation
import RISC
import RISCConfiguration
import RISCServer

struct Config: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Configuration tools.", subcommands: [ConfigCheck.self, ConfigVariablesTable.self])
}

struct ConfigCheck: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Validate the environment (and --config FILE) and print the effective configuration, secrets redacted.",
        discussion: "Exits 0 when `serve` would start with it, 2 with one line naming the variable otherwise.\n\n" + EnvironmentHelp.serve)

    @Flag(help: "Print one JSON object of variable names and values, instead of NAME=value lines.") var json = false
    @OptionGroup var config: ConfigFileOption

    func run() async throws {
        let configuration = try await Bootstrap.configuration(file: config.file) { reader throws(ServiceConfiguration.Invalid) in
            try ServiceConfiguration(reader: reader)
        }
        let summary = configuration.redactedSummary
        if json {
            return print(JSONValue.object(Dictionary(uniqueKeysWithValues: summary.map { ($0, JSONValue.string($1)) })).serialized)
        }
        for (variable, value) in summary {
            print("\(variable)=\(value)")
        }
    }
}

/// The configuration reference's table of variables comes from here, so it cannot drift from what the binary reads.
struct ConfigVariablesTable: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "variables", abstract: "Print every configuration variable, its default and meaning (a Markdown table).")

    func run() async throws {
        print(ConfigVariables.markdownTable, terminator: "")
    }
}
