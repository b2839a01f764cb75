import Logging
import PostgresNIO
import RISCStore

/// Holds one connection with `LISTEN channel` and calls `wake` for each notification, and once after each
/// (re)connect: a notification sent while the connection was down is lost, and the caller's polling only
/// covers the gap slowly. Runs until cancelled.
struct PostgresListener: Sendable {
    let client: PostgresClient
    let channel: String
    let logger: Logger

    func run(wake: @escaping @Sendable () -> Void) async {
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: channel) { notifications in
                        for try await _ in notifications { wake() }
                    }
                }
            } catch {
                if Task.isCancelled { return }
                logger.warning(
                    "Lost the LISTEN connection; relying on polling until it is back",
                    metadata: ["channel": "\(channel)", "error": "\(DatabaseErrors.describe(error))"])
            }
            wake()
            do { try await Task.sleep(for: .seconds(1)) } catch { return }
        }
    }
}
