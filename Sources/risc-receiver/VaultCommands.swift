import ArgumentParser
import Foundation
import PostgresNIO
import RISC
import RISCConfiguration
import RISCServer
import RISCStore

struct Vault: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Refresh-token vault maintenance.", subcommands: [VaultRotate.self])
}

struct VaultRotate: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "rotate",
        abstract: "Re-encrypt every grant under RISC_VAULT_KEY (old keys in RISC_VAULT_PREVIOUS_KEYS), in batches.",
        discussion: ("""
        Safe to run while the service runs, and to run again: grants already under the current key are skipped.
        Once it reports nothing left, the old keys can be removed from RISC_VAULT_PREVIOUS_KEYS.
        """) + "\n\n" + EnvironmentHelp.vaultRotate)

    @Option(help: "Grants re-encrypted per transaction.")
    var batchSize: Int = 100

    @OptionGroup var config: ConfigFileOption

    func validate() throws {
        guard (1...10_000).contains(batchSize) else { throw ValidationError("--batch-size must be 1...10000") }
    }

    func run() async throws {
        // The current key is required here: it is what every grant is re-encrypted under.
        let (databaseURL, current, previous) = try await Bootstrap.configuration(file: config.file) {
            reader throws(ServiceConfiguration.Invalid) in
            (
                try ConfigVariables.databaseURL.value(from: reader), try ConfigVariables.vaultKey.value(from: reader),
                try ConfigVariables.vaultPreviousKeys.value(from: reader)
            )
        }
        let logger = try await Bootstrap.logger("risc-receiver.vault", file: config.file)
        let cipher = VaultCipher(
            current: VaultCipher.key(base64: current)!, previous: previous.compactMap(VaultCipher.key(base64:)))
        let client = try await Bootstrap.commandDatabase(databaseURL, logger: logger)
        let grants = GrantStore(client: client, cipher: cipher, logger: logger)
        let progress = ProgressBar(label: "Re-encrypting grants")
        do {
            let rotated = try await client.whileRunning(timeout: .seconds(24 * 3600)) { _ in
                let total = try await grants.countToRotate()
                var done = 0
                progress.update(done: 0, total: total)
                while true {
                    let count = try await grants.rotateBatch(limit: batchSize)
                    if count == 0 { break }
                    done += count
                    progress.update(done: done, total: max(total, done))
                }
                progress.finish()
                let sealed = try await SubscriberStore(client: client, cipher: cipher, logger: logger).resealSecrets(rekey: true)
                if sealed > 0 { print("Re-sealed \(sealed) subscriber secret\(sealed == 1 ? "" : "s") under key \(cipher.currentKeyID).") }
                return done
            }
            print("Re-encrypted \(rotated) grant\(rotated == 1 ? "" : "s") under key \(cipher.currentKeyID).")
        } catch let error as VaultCipher.Failure {
            progress.finish()
            throw Bootstrap.fail("\(error); add the key it was sealed with to RISC_VAULT_PREVIOUS_KEYS")
        } catch is TimeoutError {
            throw Bootstrap.fail("could not reach the database named by DATABASE_URL")
        }
    }
}

/// A one-line progress bar on standard error, drawn only when standard error is a terminal: piped output
/// stays free of escape sequences and carriage returns.
final class ProgressBar: Sendable {
    let label: String
    let enabled = isatty(STDERR_FILENO) == 1

    init(label: String) { self.label = label }

    /// Without a total (work that does not know its size in advance), only the count.
    func update(done: Int, total: Int?) {
        guard enabled else { return }
        guard let total else { return FileHandle.standardError.write(Data("\r\(label) \(done)".utf8)) }
        let width = 30
        let filled = total == 0 ? width : min(width, done * width / total)
        let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
        FileHandle.standardError.write(Data("\r\(label) \(bar) \(done)/\(total)".utf8))
    }

    func finish() {
        guard enabled else { return }
        FileHandle.standardError.write(Data("\n".utf8))
    }
}
