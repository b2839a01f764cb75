import Crypto
import Foundation
import Logging
import PostgresNIO
import RISC
import RISCStore
import RISCWorker
import ServiceLifecycle
import Testing

/// A database of its own, so no other test's worker touches its events.
struct IsolatedDatabase {
    let url: String
    let client: PostgresClient

    /// Migrated with `migrator`; with none, a copy of the template every migration was applied to once.
    static func with(migrator: Migrator? = nil, _ body: @escaping @Sendable (IsolatedDatabase) async throws -> Void) async throws {
        let template = migrator == nil ? try await migratedTemplate.value : nil
        try await withNewDatabase(prefix: "risc_worker", template: template) { url in
            let client = PostgresClient(configuration: try DatabaseURL.configuration(from: url), backgroundLogger: Harness.logger)
            try await client.whileRunning(timeout: .seconds(240)) { client in
                // A copy is migrated too: nothing to do when the template is current, and a template an older
                // Migrator made on a long-lived developer's cluster is brought up to date.
                try await (migrator ?? Migrator(directory: Harness.repositoryRoot.appendingPathComponent("migrations").path))
                    .migrate(client: client, logger: Harness.logger)
                if migrator == nil { Harness.markMigrated(url) }
                try await body(IsolatedDatabase(url: url, client: client))
            }
        }
    }

    /// The name of a database on the test cluster with every migration applied, made once and then copied for each
    /// test (`CREATE DATABASE … TEMPLATE`): a copy takes a fraction of a second, migrating from scratch several. Its
    /// name carries the migrations' checksums, so a changed migration makes a new one; another test process (or a
    /// later run on the same cluster) reuses it. It is made under another name and renamed once migrated, so a run
    /// killed midway never leaves a half-migrated template.
    static let migratedTemplate = Task<String, any Error> {
        let logger = Harness.logger
        let migrator = try Migrator(directory: Harness.repositoryRoot.appendingPathComponent("migrations").path)
        let fingerprint = (migrator.migrations + migrator.routines).map { "\($0.version):\($0.checksum)" }.joined(separator: "\n")
        let name = "risc_template_" + SHA256.hash(data: Data(fingerprint.utf8)).prefix(8).map { String(format: "%02x", $0) }.joined()
        let adminURL = Harness.environment("RISC_TEST_DATABASE_URL")
        let admin = PostgresClient(configuration: try DatabaseURL.configuration(from: adminURL), backgroundLogger: logger)
        try await admin.whileRunning(timeout: .seconds(300)) { admin in
            try await admin.withConnection { connection in
                // One process makes it; any other waits here, then finds it made.
                try await connection.query("SELECT pg_advisory_lock(hashtext(\(name)))", logger: logger)
                var exists = false
                for try await _ in try await connection.query("SELECT 1 FROM pg_database WHERE datname = \(name)", logger: logger) { exists = true }
                if !exists {
                    try await withNewDatabase(prefix: "risc_template_draft", drop: false) { url in
                        let draft = PostgresClient(configuration: try DatabaseURL.configuration(from: url), backgroundLogger: logger)
                        _ = try await draft.whileRunning(timeout: .seconds(240)) { draft in try await migrator.migrate(client: draft, logger: logger)
                        }
                        let draftName = String(url.split(separator: "/").last!.split(separator: "?").first!)
                        // A rename needs the draft free of sessions; a closed client's may take a moment to end.
                        try await connection.query(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = \(draftName)", logger: logger)
                        try await eventually("the migrated template is renamed", timeout: .seconds(30)) {
                            (try? await connection.query(PostgresQuery(unsafeSQL: "ALTER DATABASE \(draftName) RENAME TO \(name)"), logger: logger))
                                != nil
                        }
                    }
                }
                try await connection.query("SELECT pg_advisory_unlock(hashtext(\(name)))", logger: logger)
            }
        }
        return name
    }

    /// A new database on the test cluster while `body` runs (empty, or a copy of `template`), dropped afterwards
    /// however `body` ends, unless `drop` is false or the cluster is disposable (`dropsDatabases`).
    static func withNewDatabase(
        prefix: String, template: String? = nil, drop: Bool = true, _ body: @escaping @Sendable (String) async throws -> Void
    ) async throws {
        let logger = Harness.logger
        let adminURL = Harness.environment("RISC_TEST_DATABASE_URL")
        let admin = PostgresClient(configuration: try DatabaseURL.configuration(from: adminURL), backgroundLogger: logger)
        let name = "\(prefix)_\(UInt32.random(in: 0...UInt32.max))"
        let url = adminURL.replacingOccurrences(of: "/risc_test?", with: "/\(name)?")
        try await admin.whileRunning(timeout: .seconds(300)) { admin in
            let copy = template.map { " TEMPLATE \($0)" } ?? ""
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)\(copy)"), logger: logger)
            let result: Result<Void, any Error>
            do {
                try await body(url)
                result = .success(())
            } catch {
                result = .failure(error)
            }
            if drop || (try? result.get()) == nil { try await Self.drop(name, admin: admin) }
            try result.get()
        }
    }

    /// Whether a test drops the databases it made. scripts/test.sh removes its whole cluster after the run
    /// (RISC_TEST_CLUSTER_DISPOSABLE=1), so there they stay: PostgreSQL 15's DROP DATABASE waits for an immediate
    /// checkpoint, which writes and fsyncs every dirty page of the cluster. At the suite's peak one took 23 s, and
    /// every other test's commits waited behind it (sign-ins ran past their 15 s and answered 503).
    static let dropsDatabases = ProcessInfo.processInfo.environment["RISC_TEST_CLUSTER_DISPOSABLE"] != "1"

    static func drop(_ name: String, admin: PostgresClient) async throws {
        guard dropsDatabases else { return }
        try await admin.query(PostgresQuery(unsafeSQL: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)"), logger: Harness.logger)
    }

    /// `count` users, each with one session, and one event each: sessions-revoked for even users,
    /// account-disabled with reason hijacking (two actions) for odd ones.
    func seed(count: Int) async throws {
        try await client.query(
            """
            INSERT INTO risc_users (sub) SELECT 'u-' || i FROM generate_series(1, \(count)) AS i
            """)
        try await client.query(
            """
            INSERT INTO risc_sessions (token_hash, sub, created_at, expires_at)
            SELECT sha256(('t-' || i)::bytea), 'u-' || i, now() - interval '1 minute', now() + interval '1 day'
            FROM generate_series(1, \(count)) AS i
            """)
        let sessionsRevoked = EventType.sessionsRevoked.rawValue
        let accountDisabled = EventType.accountDisabled.rawValue
        try await client.query(
            """
            INSERT INTO risc_events (issuer, jti, event_types, subject_sub, events, claims, issued_at)
            SELECT 'https://transmitter.test/', 'jti-' || i, ARRAY[t.uri], 'u-' || i,
                   jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
                       'type', t.uri, 'subject', jsonb_build_object('format', 'iss_sub', 'iss', 'https://accounts.google.com', 'sub', 'u-' || i),
                       'reason', CASE WHEN i % 2 = 1 THEN 'hijacking' END))),
                   '{}'::jsonb, now()
            FROM generate_series(1, \(count)) AS i,
                 LATERAL (SELECT CASE WHEN i % 2 = 0 THEN \(sessionsRevoked) ELSE \(accountDisabled) END AS uri) AS t
            """)
    }

    func count(_ sql: String) async throws -> Int {
        for try await value in try await client.query(PostgresQuery(unsafeSQL: sql)).decode(Int.self) { return value }
        return 0
    }

    /// Checks that every seeded event is done exactly once, with exactly its actions, and every session revoked.
    func expectAllAppliedOnce(count: Int) async throws {
        #expect(try await self.count("SELECT count(*) FROM risc_events WHERE status = 'done'") == count)
        // Each event: one action for sessions-revoked, two for hijacking; never more.
        #expect(try await self.count("SELECT count(*) FROM risc_event_actions") == count + count / 2 + count % 2)
        #expect(
            try await self.count(
                """
                SELECT count(*) FROM (
                    SELECT e.id FROM risc_events e LEFT JOIN risc_event_actions a ON a.event_id = e.id
                    GROUP BY e.id, e.event_types HAVING count(a.id) <> CASE WHEN e.event_types[1] LIKE '%sessions-revoked' THEN 1 ELSE 2 END
                ) AS wrong
                """) == 0)
        #expect(try await self.count("SELECT count(*) FROM risc_events WHERE attempts <> 1") == 0)
        #expect(try await self.count("SELECT count(*) FROM risc_sessions WHERE revoked_at IS NULL") == 0)
        #expect(try await self.count("SELECT count(*) FROM risc_event_actions WHERE kind = 'revoke_sessions' AND rows_affected <> 1") == 0)
    }

    func waitUntil(timeout: Duration, _ condition: () async throws -> Bool) async throws {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if try await condition() { return }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("timed out after \(timeout)")
    }
}

@Suite("The worker: crash safety, concurrency, retries", .timeLimit(.minutes(3)))
struct WorkerTests {
    @Test("kill -9 mid-batch, then a restart: every event done exactly once, no action applied twice")
    func crashSafety() async throws {
        try await IsolatedDatabase.with { database in
            let count = 3000
            try await database.seed(count: count)
            let environment = ["DATABASE_URL": database.url, "LOG_LEVEL": "warning"]
            // One event a transaction: slow enough that a test process starved for seconds on a loaded machine still
            // finds most of the work left when it kills the worker (with batches of 20 it once found none).
            let first = try ChildProcess.spawn(
                riscReceiverBinary, ["worker", "--batch-size", "1", "--concurrency", "1"], environment: environment,
                outputFile: "/dev/null")
            // Kill it while it is working: some events done, most still to do.
            try await database.waitUntil(timeout: .seconds(60)) {
                try await database.count("SELECT count(*) FROM risc_events WHERE status = 'done'") >= 200
            }
            first.kill(SIGKILL)
            #expect(try await first.wait() == 128 + SIGKILL)
            let doneAtKill = try await database.count("SELECT count(*) FROM risc_events WHERE status = 'done'")
            #expect(doneAtKill < count, "the worker finished before it could be killed")

            let second = try ChildProcess.spawn(
                riscReceiverBinary, ["worker", "--batch-size", "200"], environment: environment, outputFile: "/dev/null")
            try await database.waitUntil(timeout: .seconds(60)) {
                try await database.count("SELECT count(*) FROM risc_events WHERE status <> 'done'") == 0
            }
            second.kill(SIGTERM)
            #expect(try await second.wait() == 0)
            try await database.expectAllAppliedOnce(count: count)
        }
    }

    @Test("Several workers at once never process an event twice")
    func concurrentWorkers() async throws {
        try await IsolatedDatabase.with { database in
            let count = 2000
            try await database.seed(count: count)
            let environment = ["DATABASE_URL": database.url, "LOG_LEVEL": "warning"]
            let metricsPort = freePort()
            let workers = try (0..<3).map { index in
                try ChildProcess.spawn(
                    riscReceiverBinary,
                    ["worker", "--batch-size", "25", "--concurrency", "2"] + (index == 0 ? ["--metrics-port", String(metricsPort)] : []),
                    environment: environment, outputFile: "/dev/null")
            }
            try await database.waitUntil(timeout: .seconds(60)) {
                try await database.count("SELECT count(*) FROM risc_events WHERE status <> 'done'") == 0
            }
            // A worker-only process can be scraped too.
            let metrics = try await Client(base: "http://127.0.0.1:\(metricsPort)").send(.GET, "/metrics")
            #expect(metrics.body.contains(#"risc_worker_events_total{outcome="done"}"#), "\(metrics.body.prefix(500))")
            #expect(metrics.body.contains("risc_worker_queue_depth 0"))
            for worker in workers { worker.kill(SIGTERM) }
            for worker in workers { #expect(try await worker.wait() == 0) }
            try await database.expectAllAppliedOnce(count: count)
        }
    }

    @Test("An event that keeps failing is retried with backoff, then dead-lettered and kept, and can be replayed")
    func retriesThenDead() async throws {
        try await IsolatedDatabase.with { database in
            // Events the worker cannot decode fail every attempt.
            try await database.client.query(
                """
                INSERT INTO risc_events (issuer, jti, event_types, events, claims, issued_at)
                VALUES ('https://transmitter.test/', 'broken', ARRAY['x'], '[{"no": "type"}]', '{}', now())
                """)
            // Backoffs of 30 to 60 s: far longer than a loaded machine can stall between two calls (a 6 to 12 s one
            // passed within the first batch's own transaction, once, with the whole suite running). The later
            // retries are made due at once, below, rather than waited for.
            let queue = EventQueue(
                client: database.client, retryPolicy: RetryPolicy(maxAttempts: 3, baseDelay: 60, maxDelay: 60), logger: Harness.logger)
            let first = try await queue.processBatch(limit: 10)
            #expect(first.claimed == 1)
            #expect(first.failed == 1)
            #expect(
                try await database.count(
                    "SELECT count(*) FROM risc_events WHERE status = 'retry' AND attempts = 1 AND run_after > now() AND last_error IS NOT NULL") == 1)
            // Not runnable until its backoff has passed.
            #expect(try await queue.processBatch(limit: 10).claimed == 0)
            try await database.waitUntil(timeout: .seconds(60)) {
                try await database.client.query("UPDATE risc_events SET run_after = now() WHERE jti = 'broken' AND status = 'retry'")
                _ = try await queue.processBatch(limit: 10)
                return try await database.count("SELECT count(*) FROM risc_events WHERE status = 'dead'") == 1
            }
            #expect(try await database.count("SELECT attempts FROM risc_events WHERE jti = 'broken'") == 3)
            #expect(try await database.count("SELECT count(*) FROM risc_event_actions") == 0)

            // Once the cause is fixed, a replay runs it again and it completes.
            try await database.client.query(
                """
                UPDATE risc_events SET events = '[{"type": "https://schemas.openid.net/secevent/risc/event-type/verification", "state": "fixed"}]'
                WHERE jti = 'broken'
                """)
            let id = try await database.count("SELECT id FROM risc_events WHERE jti = 'broken'")
            let events = EventAdmin(client: database.client, logger: Harness.logger)
            #expect(try await events.replay(id: Int64(id)) == .replayed)
            #expect(try await queue.processBatch(limit: 10).done == 1)
            #expect(try await database.count("SELECT count(*) FROM risc_events WHERE status = 'done' AND attempts = 1 AND last_error IS NULL") == 1)
            #expect(try await database.count("SELECT count(*) FROM risc_event_actions WHERE kind = 'record_verification' AND detail = 'fixed'") == 1)
            #expect(try await events.replay(id: 999_999) == .notFound)
        }
    }

    @Test("Graceful shutdown of an in-process worker finishes its batch and stops")
    func gracefulShutdown() async throws {
        try await IsolatedDatabase.with { database in
            try await database.seed(count: 5000)
            var settings = EventWorker.Settings()
            settings.batchSize = 50
            let worker = EventWorker(client: database.client, settings: settings, logger: Harness.logger)
            let group = ServiceGroup(configuration: .init(services: [.init(service: worker)], logger: Harness.logger))
            try await withThrowingTaskGroup(of: Void.self) { tasks in
                tasks.addTask { try await group.run() }
                try await database.waitUntil(timeout: .seconds(30)) {
                    try await database.count("SELECT count(*) FROM risc_events WHERE status = 'done'") > 0
                }
                await group.triggerGracefulShutdown()
                try await tasks.waitForAll()
            }
            // Whole batches only: the events done are a multiple of the batch, and each has all its actions.
            let done = try await database.count("SELECT count(*) FROM risc_events WHERE status = 'done'")
            #expect(done > 0)
            #expect(done < 5000, "the worker drained the whole queue instead of stopping after its batch")
            #expect(done % 50 == 0, "\(done) events done: a batch was cut short")
            #expect(
                try await database.count(
                    """
                    SELECT count(*) FROM risc_events e WHERE status = 'done'
                    AND NOT EXISTS (SELECT 1 FROM risc_event_actions a WHERE a.event_id = e.id)
                    """) == 0)
            #expect(
                try await database.count("SELECT count(*) FROM risc_event_actions a JOIN risc_events e ON e.id = a.event_id WHERE e.status <> 'done'")
                    == 0)
        }
    }
}

@Suite("Vault key rotation", .timeLimit(.minutes(3)))
struct VaultRotationTests {
    @Test("vault rotate re-encrypts every grant under the new key; old ciphertexts no longer needed; no escapes when piped")
    func rotate() async throws {
        try await IsolatedDatabase.with { database in
            let oldKey = Harness.vaultKey
            let newKey = Data((0..<32).map { UInt8(255 - $0) }).base64EncodedString()
            let old = GrantStore(client: database.client, cipher: VaultCipherForTests.cipher, logger: Harness.logger)
            var tokens: [UUID: String] = [:]
            for index in 0..<250 {
                let token = "1//rotate-\(index)-\(UUID().uuidString)"
                tokens[try await old.store(sub: "rotate-\(index % 7)", clientID: Harness.audience, scopes: [], refreshToken: token)] = token
            }
            let environment = [
                "DATABASE_URL": database.url, "RISC_VAULT_KEY": newKey, "RISC_VAULT_PREVIOUS_KEYS": oldKey, "LOG_LEVEL": "warning",
            ]
            let result = try await runRiscReceiver(["vault", "rotate", "--batch-size", "40"], environment: environment)
            #expect(result.status == 0, "\(result.output)")
            #expect(result.output.contains("Re-encrypted 250 grants"), "\(result.output)")
            #expect(!result.output.contains("\u{1B}") && !result.output.contains("\r"), "escape sequences in piped output")

            // Readable with the new key alone.
            let newOnly = GrantStore(
                client: database.client, cipher: VaultCipher(current: VaultCipher.key(base64: newKey)!), logger: Harness.logger)
            for (id, token) in tokens {
                guard case .active(let grant) = try await newOnly.lookup(id: id) else {
                    Issue.record("grant \(id) is not readable with the new key")
                    continue
                }
                #expect(grant.refreshToken == token)
            }
            let again = try await runRiscReceiver(["vault", "rotate"], environment: environment)
            #expect(again.output.contains("Re-encrypted 0 grants"), "\(again.output)")

            // Without the key a grant was sealed with, rotation stops with a clear message.
            _ = try await old.store(sub: "late", clientID: Harness.audience, scopes: [], refreshToken: "1//sealed-with-the-old-key")
            let missing = try await runRiscReceiver(["vault", "rotate"], environment: ["DATABASE_URL": database.url, "RISC_VAULT_KEY": newKey])
            #expect(missing.status == 1)
            #expect(missing.output.contains("RISC_VAULT_PREVIOUS_KEYS"), "\(missing.output)")
        }
    }
}
