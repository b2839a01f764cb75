import ArgumentParser
import Logging

@main
struct RiscReceiver: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "risc-receiver",
        abstract: "Receives Google Cross-Account Protection (RISC) security events and acts on them.",
        subcommands: [Serve.self, Worker.self, Migrate.self, Config.self, Vault.self, Dev.self]
    )
}

struct Dev: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "A local stand-in for Google, for development and tests.",
        subcommands: [DevTransmitterCommand.self, DevSend.self, DevIDToken.self]
    )
}
