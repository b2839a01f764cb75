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

    static let heartbeat: Duration = .seconds(10)
    static let heartbeatTimeout: Duration = .seconds(5)

    func run(wake: @escaping @Sendable () -> Void) async {
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await withThrowingTaskGroup(of: Void.self) { group in
                        // Ends as soon as the connection closes: a LISTEN on a closed connection would wait for good.
                        group.addTask {
                            try await whileOpen(connection) {
                                try await connection.listen(on: channel) { notifications in
                                    for try await _ in notifications { wake() }
                                }
                            }
                        }
                        // A connection whose server vanished says nothing, for good: a query that goes unanswered
                        // closes it, and the loop above connects again.
                        group.addTask {
                            while true {
                                try await Task.sleep(for: Self.heartbeat)
                                do {
                                    _ = try await withTimeout(Self.heartbeatTimeout) {
                                        try await connection.query("SELECT 1", logger: logger)
                                    }
                                } catch {
                                    try? await connection.close()
                                    throw error
                                }
                            }
                        }
                        try await group.next()
                        group.cancelAll()
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
