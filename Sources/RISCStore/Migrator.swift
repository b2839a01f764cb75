import Crypto
import Foundation
import Logging
import PostgresNIO

/// Brings a database to this build's schema, in one transaction under an advisory lock:
/// - `migrations/NNNN_name.sql`, each applied once, in order, and recorded with its checksum (an applied file
///   that has since changed is an error). Tables and indexes live here: a change to one is a new file.
/// - `migrations/routines/NAME.sql`, each applied again whenever its checksum differs from the one recorded.
///   Functions, procedures and triggers live here, written as `CREATE OR REPLACE`: changing one is a diff to
///   its file. (A changed signature or result type needs a `DROP ... IF EXISTS` of the old one first.)
/// Re-running is a no-op.
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
        case beforeBaseline(version: String)

        public var description: String {
            switch self {
            case .changed(let version): "migration \(version) was changed after it was applied"
            case .unreadable(let path): "cannot read migrations from \(path)"
            case .unknownApplied(let version):
                "the database has migration \(version), which this build does not know: it is older than the database"
            case .beforeBaseline(let version):
                "the database was migrated by a development build from before 0.1.0 (it has migration \(version)), "
                    + "which this version cannot upgrade: point DATABASE_URL at a new, empty database and run "
                    + "`risc-receiver migrate` (copy out of the old one anything you still need)"
            }
        }
    }

    /// Arbitrary but fixed: every risc-receiver instance takes this lock to migrate.
    static let advisoryLockKey: Int64 = 0x5249_5343_4D49_4752  // "RISCMIGR"

    /// The first migration of the schema history that 0.1.0's baseline replaced.
    static let beforeBaselineVersion = "0001_events"

    public let migrations: [Migration]
    /// `version` is the routine's file name without `.sql`.
    public let routines: [Migration]

    public init(migrations: [Migration], routines: [Migration] = []) {
        self.migrations = migrations.sorted { $0.version < $1.version }
        self.routines = routines.sorted { $0.version < $1.version }
    }

    /// Reads every `*.sql` in a directory, and in its `routines/` folder; a file name without `.sql` is the
    /// version (or the routine's name).
    public init(directory: String) throws {
        self.init(
            migrations: try Self.files(in: directory),
            routines: try Self.files(in: (directory as NSString).appendingPathComponent("routines"), optional: true))
    }

    private static func files(in directory: String, optional: Bool = false) throws -> [Migration] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else {
            if optional, !FileManager.default.fileExists(atPath: directory) { return [] }
            throw Failure.unreadable(path: directory)
        }
        var files: [Migration] = []
        for name in names where name.hasSuffix(".sql") {
            let path = (directory as NSString).appendingPathComponent(name)
            guard let sql = try? String(contentsOfFile: path, encoding: .utf8) else { throw Failure.unreadable(path: path) }
            files.append(Migration(version: String(name.dropLast(4)), sql: sql))
        }
        return files
    }

    /// Applies what is pending; returns what was applied now: migration versions, then `routines/NAME` for
    /// each routine (re)applied.
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
            try await connection.query(
                """
                CREATE TABLE IF NOT EXISTS schema_routines (
                    name       text        PRIMARY KEY,
                    checksum   text        NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )
                """, logger: logger)
            let applied = try await Self.recorded("SELECT version, checksum FROM schema_migrations", on: connection, logger: logger)
            if applied[Self.beforeBaselineVersion] != nil {
                throw Failure.beforeBaseline(version: Self.beforeBaselineVersion)
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
                try await Self.run(migration, on: connection, logger: logger)
                try await connection.query(
                    "INSERT INTO schema_migrations (version, checksum) VALUES (\(migration.version), \(migration.checksum))",
                    logger: logger)
                logger.info("Applied migration", metadata: ["version": "\(migration.version)"])
                appliedNow.append(migration.version)
            }
            let routinesApplied = try await Self.recorded("SELECT name, checksum FROM schema_routines", on: connection, logger: logger)
            for routine in routines where routinesApplied[routine.version] != routine.checksum {
                try await Self.run(routine, on: connection, logger: logger)
                try await connection.query(
                    """
                    INSERT INTO schema_routines (name, checksum) VALUES (\(routine.version), \(routine.checksum))
                    ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()
                    """,
                    logger: logger)
                logger.info("Applied routine", metadata: ["routine": "\(routine.version)"])
                appliedNow.append("routines/\(routine.version)")
            }
            return appliedNow
        }
    }

    /// The migration versions a database has applied (`/readyz` compares them with this build's).
    public static func appliedVersions(client: PostgresClient, timeout: Duration, logger: Logger) async throws -> Set<String> {
        try await client.withConnection(timeout: timeout) { connection in
            Set(try await recorded("SELECT version, checksum FROM schema_migrations", on: connection, logger: logger).keys)
        }
    }

    private static func recorded(_ sql: String, on connection: PostgresConnection, logger: Logger) async throws -> [String: String] {
        var recorded: [String: String] = [:]
        for try await (name, checksum) in try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger)
            .decode((String, String).self)
        {
            recorded[name] = checksum
        }
        return recorded
    }

    private static func run(_ file: Migration, on connection: PostgresConnection, logger: Logger) async throws {
        for statement in SQLScript.statements(in: file.sql) {
            try await connection.query(PostgresQuery(unsafeSQL: statement), logger: logger)
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
