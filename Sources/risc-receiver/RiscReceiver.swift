import ArgumentParser
import Foundation
import Logging
import RISC

@main
struct RiscReceiver: AsyncParsableCommand {

    static let configuration = CommandConfiguration(
        commandName: "risc-receiver",
        abstract: "Receives Google Cross-Account Protection (RISC) security events and acts on them.",
        discussion: "Exit codes: 0 ok, 1 failure or not found, 2 usage or configuration error.",
        version: "\(Release.version) (\(BuildInfo.commit))",
        subcommands: [
            Serve.self, Worker.self, Health.self, Migrate.self, Events.self, Users.self, Stats.self, StreamCommand.self, Transmitters.self,
            Streams.self, Subscribers.self,
            Notifications.self, Config.self, Vault.self, Dev.self,
        ]
    )

    /// ArgumentParser's usage errors exit 64; scripts are promised 2 for usage and configuration errors.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            // ArgumentParser writes its message to standard error itself: after the log lines still waiting.
            StandardErrorWriter.shared.flush()
            let code = exitCode(for: error)
            if code == .validationFailure {
                // Prints the usage message exactly as ArgumentParser would, then exits 2.
                FileHandle.standardError.write(Data((fullMessage(for: error) + "\n").utf8))
                Foundation.exit(2)
            }
            exit(withError: error)
        }
    }
}

struct Dev: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "A local stand-in for Google, for development and tests.",
        subcommands: [DevTransmitterCommand.self, DevSend.self, DevIDToken.self, DevWebhookSink.self]
    )

    /// Seconds SIGTERM waits for the development servers' in-flight requests.
    static let shutdownTimeout: Double = 5
}
