import Crypto
import Foundation
import Logging
import PostgresNIO

/// Applies `migrations/NNNN_name.sql` in order, in one transaction under an advisory lock, recording each
/// with its checksum. Re-running is a no-op; an applied file that has since changed is an error.
public struct Migrator: Sendable {
    public struct Migration: Sendable, Equatable {
        public var version: String
        public var sql: String
        public init(version: String, sql: String) {
            self.version = version
            self.sql = sql
        }

        public var checksum: String { SHA256.hash(data: Data(sql.utf8)).map { String(format: "%02x", $0) }.joined() }
    }

    public enum Failure: Error, CustomStringConvertible {
        case changed(version: String)
        case unreadable(path: String)
        case unknownApplied(version: String)

        public var description: String {
            switch self {
            case .changed(let version): "migration \(version) was changed after it was applied"
            case .unreadable(let path): "cannot read migrations from \(path)"
            case .unknownApplied(let version):
                "the database has migration \(version), which this build does not know: it is older than the database"
            }
        }
    }

    /// Arbitrary but fixed: every risc-receiver instance takes this lock to migrate.
    static let advisoryLockKey: Int64 = 0x5249_5343_4D49_4752  // "RISCMIGR"

    public let migrations: [Migration]

    public init(migrations: [Migration]) {
        self.migrations = migrations.sorted { $0.version < $1.version }
    }

    /// Reads every `*.sql` in a directory; the file name without `.sql` is the version.
    public init(directory: String) throws {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else {
            throw Failure.unreadable(path: directory)
        }
        var migrations: [Migration] = []
        for name in names where name.hasSuffix(".sql") {
            let path = (directory as NSString).appendingPathComponent(name)
            guard let sql = try? String(contentsOfFile: path, encoding: .utf8) else { throw Failure.unreadable(path: path) }
            migrations.append(Migration(version: String(name.dropLast(4)), sql: sql))
        }
        self.init(migrations: migrations)
    }

    /// Applies what is pending; returns the versions applied now.
    @discardableResult
    public func migrate(client: PostgresClient, logger: Logger) async throws -> [String] {
        do {
            return try await applyPending(client: client, logger: logger)
        } catch let error as PostgresTransactionError {
            // Report what went wrong inside the transaction (a changed file, a failing statement).
            throw error.closureError ?? error
        }
    }

    private func applyPending(client: PostgresClient, logger: Logger) async throws -> [String] {
        try await client.withTransaction(logger: logger) { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(\(Self.advisoryLockKey))", logger: logger)
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS schema_migrations (
                    version    text        PRIMARY KEY,
                    checksum   text        NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """, logger: logger)
            var applied: [String: String] = [:]
            for try await (version, checksum) in try await connection.query(
                "SELECT version, checksum FROM schema_migrations", logger: logger
            ).decode((String, String).self) {
                applied[version] = checksum
            }
            let known = Set(migrations.map(\.version))
            if let unknown = applied.keys.sorted().first(where: { !known.contains($0) }) {
                throw Failure.unknownApplied(version: unknown)
            }
            var appliedNow: [String] = []
            for migration in migrations {
                if let checksum = applied[migration.version] {
                    guard checksum == migration.checksum else { throw Failure.changed(version: migration.version) }
                    continue
                }
                for statement in SQLScript.statements(in: migration.sql) {
                    try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
                }
                try await connection.query(
                    "INSERT INTO schema_migrations (version, checksum) VALUES (\(migration.version), \(migration.checksum))",
                    logger: logger)
                logger.info("Applied migration", metadata: ["version": "\(migration.version)"])
                appliedNow.append(migration.version)
            }
            return appliedNow
        }
    }
}

extension PostgresClient {
    /// Runs `body` while the client's pool runs, for one-shot commands outside a service group.
    /// Gives up with `TimeoutError` when the body takes longer than `timeout` (an unreachable database
    /// would otherwise wait for a connection forever).
    public func whileRunning<Result: Sendable>(
        timeout: Duration = .seconds(60), _ body: @escaping @Sendable (PostgresClient) async throws -> Result
    ) async throws -> Result {
        // The body waits until run() is entered (it marks the client running before it first suspends): a lease
        // before that works, but postgres-nio warns on standard error, which a script reading a command's output
        // sees (found under load by a test reading `stream health --json`).
        let (started, starting) = AsyncStream<Void>.makeStream()
        return try await withThrowingTaskGroup(of: Result?.self) { group in
            group.addTask {
                starting.finish()
                await self.run()
                return nil
            }
            group.addTask {
                for await _ in started {}
                return try await withTimeout(timeout) { try await body(self) }
            }
            defer { group.cancelAll() }
            while let result = try await group.next() {
                if let result { return result }
            }
            throw CancellationError()
        }
    }
}
