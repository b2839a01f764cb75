import Crypto
import Foundation
import Logging
import PostgresNIO
import RISC

/// Brings a database to this build's schema, in one transaction under an advisory lock:
/// - `migrations/NNNN_name.sql`, each applied once, in order, and recorded with its checksum (an applied file
///   that has since changed is an error). Tables and indexes live here: a change to one is a new file.
/// - `migrations/routines/NAME.sql`, each applied again whenever its checksum differs from the one recorded.
///   Functions, procedures and triggers live here, written as `CREATE OR REPLACE`: changing one is a diff to
///   its file. (A changed signature or result type needs a `DROP ... IF EXISTS` of the old one first.)
/// Re-running is a no-op. Each routine is recorded with the release that applied it: an older release's `migrate`
/// (a host restarted mid-rollout) leaves routines a newer release applied as they are, never rolling them back.
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
    /// The release applying them (`Release.version`).
    public let release: String

    public init(migrations: [Migration], routines: [Migration] = [], release: String = Release.version) {
        self.migrations = migrations.sorted { $0.version < $1.version }
        self.routines = routines.sorted { $0.version < $1.version }
        self.release = release
    }

    /// Reads every `*.sql` in a directory, and in its `routines/` folder; a file name without `.sql` is the
    /// version (or the routine's name).
    public init(directory: String) throws {
        self.init(
            migrations: try Self.files(in: directory),
            routines: try Self.files(in: (directory as NSString).appendingPathComponent("routines")))
    }

    private static func files(in directory: String) throws -> [Migration] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: directory) else {
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
                    applied_at timestamptz NOT NULL DEFAULT now(),
                    release    text        NOT NULL DEFAULT ''
                )
                """, logger: logger)
            try await connection.query("ALTER TABLE schema_routines ADD COLUMN IF NOT EXISTS release text NOT NULL DEFAULT ''", logger: logger)
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
            let releases = try await Self.recorded("SELECT DISTINCT release, '' FROM schema_routines", on: connection, logger: logger)
            if let newer = releases.keys.first(where: { Release.isNewer($0, than: release) }) {
                logger.notice(
                    "Routines were applied by a newer release; left as they are", metadata: ["release": "\(newer)", "this": "\(release)"])
                return appliedNow
            }
            for routine in routines where routinesApplied[routine.version] != routine.checksum {
                try await Self.run(routine, on: connection, logger: logger)
                try await connection.query(
                    """
                    INSERT INTO schema_routines (name, checksum, release) VALUES (\(routine.version), \(routine.checksum), \(release))
                    ON CONFLICT (name) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now(), release = EXCLUDED.release
                    """,
                    logger: logger)
                logger.info("Applied routine", metadata: ["routine": "\(routine.version)"])
                appliedNow.append("routines/\(routine.version)")
            }
            return appliedNow
        }
    }

    /// What `migrate` would still apply (`/readyz` is not ready while anything is): the versions of pending
    /// migrations, then `routines/NAME` for each routine whose recorded checksum is not this build's. Routines a newer
    /// release applied are current. Nil when the database has no schema_migrations at all.
    public func pending(client: PostgresClient, timeout: Duration, logger: Logger) async throws -> [String]? {
        try await client.withConnection(timeout: timeout) { connection in
            var tables: [String] = []
            for try await name in try await connection.query(
                "SELECT relname::text FROM pg_class WHERE relname IN ('schema_migrations', 'schema_routines') AND relkind = 'r'",
                logger: logger
            ).decode(String.self) { tables.append(name) }
            guard tables.contains("schema_migrations") else { return nil }
            let applied = try await Self.recorded("SELECT version, checksum FROM schema_migrations", on: connection, logger: logger)
            var pending = migrations.map(\.version).filter { applied[$0] == nil }
            guard tables.contains("schema_routines") else { return pending + routines.map { "routines/\($0.version)" } }
            let recorded = try await Self.recorded("SELECT name, checksum FROM schema_routines", on: connection, logger: logger)
            let releases = try await Self.recorded("SELECT DISTINCT release, '' FROM schema_routines", on: connection, logger: logger)
            if !releases.keys.contains(where: { Release.isNewer($0, than: release) }) {
                pending += routines.filter { recorded[$0.version] != $0.checksum }.map { "routines/\($0.version)" }
            }
            return pending
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
