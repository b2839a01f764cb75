import AsyncHTTPClient
import DevTransmitter
import Foundation
import NIOCore
import PostgresNIO
import Synchronization
import Testing

@testable import RISC
@testable import RISCStore

/// A database of its own whose table statistics count only what a `serve` did: migrated by a client that has ended,
/// and read once every other client has ended (a backend reports its counts when it exits; while it runs, only
/// every one to ten seconds).
struct CountedDatabase {
    let url: String

    static func with(_ body: @escaping @Sendable (CountedDatabase) async throws -> Void) async throws {
        try await IsolatedDatabase.withNewDatabase(prefix: "risc_counted") { url in
            // Migrated by a client that ends before `body`: its counts are then reported, and not counted again.
            let client = PostgresClient(configuration: try DatabaseURL.configuration(from: url), backgroundLogger: Harness.logger)
            _ = try await client.whileRunning(timeout: .seconds(240)) { client in
                let migrations = Harness.repositoryRoot.appendingPathComponent("migrations").path
                try await Migrator(directory: migrations).migrate(client: client, logger: Harness.logger)
            }
            try await body(CountedDatabase(url: url))
        }
    }

    /// Sequential and index scans of every table so far, once no other client is connected to the database.
    func scans() async throws -> [String: Int] {
        let client = PostgresClient(configuration: try DatabaseURL.configuration(from: url), backgroundLogger: Harness.logger)
        return try await client.whileRunning(timeout: .seconds(60)) { client in
            // One connection for all of it: `pid <> pg_backend_pid()` leaves out only the connection asking, so a
            // second one of this pool (opened while the first was still held by an unread result) was counted as
            // another client, and stayed until its idle timeout.
            try await client.withConnection { connection in
                // Whatever is left of a killed `serve` is ended now: a loaded machine was seen taking over 30 s to
                // notice it had gone, and an ended backend reports its counts as it exits.
                _ = try await connection.query(
                    """
                    SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                    WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()
                    """, logger: Harness.logger
                ).collect()
                try await eventually("every other client of the database has gone", timeout: .seconds(30)) {
                    let others = try await connection.query(
                        """
                        SELECT count(*)::int8 FROM pg_stat_activity
                        WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()
                        """, logger: Harness.logger
                    ).collect().first?.decode(Int64.self)
                    return others == 0
                }
            }
            var scans: [String: Int] = [:]
            let rows = try await client.query(
                "SELECT relname::text, (coalesce(seq_scan, 0) + coalesce(idx_scan, 0))::int8 FROM pg_stat_user_tables")
            for try await (name, count) in rows.decode((String, Int64).self) { scans[name] = Int(count) }
            return scans
        }
    }

    /// `serve` (with `arguments`) on this database beside a development transmitter; the scans of each table that
    /// `body` caused, counted after `serve` has ended.
    func scans(
        of tables: [String], arguments: [String] = [], waitUntilReady: Bool = true,
        _ body: @escaping @Sendable (ServeProcess) async throws -> Void
    ) async throws -> [String: Int] {
        let before = try await scans()
        let transmitter = try await DevTransmitter(settings: .init(port: 0, audience: Harness.audience), logger: Harness.logger)
        let url = self.url
        try await serving(transmitter) {
            let serve = try ServeProcess.start(databaseURL: url, transmitter: transmitter, arguments: arguments)
            defer { serve.stop() }
            if waitUntilReady { try await serve.waitUntilReady() }
            try await body(serve)
        }
        let after = try await scans()
        return Dictionary(uniqueKeysWithValues: tables.map { ($0, (after[$0] ?? 0) - (before[$0] ?? 0)) })
    }
}

@Suite("Unauthenticated requests cost the database little", .timeLimit(.minutes(3)))
struct DatabaseCostTests {
    @Test("50 checks of one unknown session token look it up in the database at most twice; each still answers invalid_session")
    func unknownSessionToken() async throws {
        try await CountedDatabase.with { database in
            let unknown = "unknown-\(UUID().uuidString)"
            let took = Mutex(Duration.zero)
            let scans = try await database.scans(of: ["risc_sessions"]) { serve in
                let started = ContinuousClock.now
                for _ in 0..<50 {
                    let reply = try await serve.get("/v1/session", bearer: unknown)
                    #expect(reply.status == 401 && reply.json["error"] == "invalid_session", "\(reply.status) \(reply.body)")
                }
                took.withLock { $0 = ContinuousClock.now - started }
            }
            // One lookup per 5 s that a miss is remembered (a loaded machine may take longer than 5 s for the 50).
            let allowed = 2 + Int(took.withLock { $0 } / .seconds(5))
            #expect(
                (1...allowed).contains(scans["risc_sessions"] ?? 0),
                "risc_sessions was scanned \(scans["risc_sessions"] ?? 0) times in \(took.withLock { $0 }), at most \(allowed) allowed")
        }
    }

    @Test("A token remembered as unknown works as soon as sign-in creates it; the memory holds hashes only, and is bounded")
    func signInAfterAMiss() async throws {
        try await IsolatedDatabase.with { database in
            let misses = SessionMissCache(maxEntries: 3)
            let sessions = SessionStore(client: database.client, databaseTimeout: .seconds(60), misses: misses, logger: Harness.logger)
            // Sign-in mints its tokens, so no check can have seen one before; a token chosen here stands for one guessed.
            let token = "guessed-\(UUID().uuidString)"
            guard case .invalid = try await sessions.lookup(token: token) else {
                Issue.record("an unknown token was not invalid")
                return
            }
            #expect(misses.contains(SessionStore.tokenHash(token)))
            let profile = GoogleIDToken.Profile(
                sub: "miss-\(UUID().uuidString)", email: nil, emailVerified: nil, name: nil, picture: nil, hostedDomain: nil)
            guard case .signedIn = try await sessions.signIn(profile, issuedAt: Date(), token: token) else {
                Issue.record("the sign-in was refused")
                return
            }
            guard case .valid(let user, _, _, _) = try await sessions.lookup(token: token) else {
                Issue.record("the new session was hidden by the remembered miss")
                return
            }
            #expect(user.sub == profile.sub)
            for index in 0..<10 { _ = try await sessions.lookup(token: "unknown-\(index)") }
            #expect(misses.count <= 3)
        }
    }

    @Test("50 concurrent /readyz and 50 concurrent /metrics share database checks at most a second old")
    func probes() async throws {
        try await CountedDatabase.with { database in
            let polls = Tally()
            let scans = try await database.scans(of: ["schema_migrations", "risc_events"], arguments: ["--no-worker"], waitUntilReady: false) {
                serve in
                // Ready once the keys are loaded; every poll until then may check the database too.
                try await eventually("serve is ready", timeout: .seconds(30)) {
                    polls.value.withLock { $0 += 1 }
                    return (try? await serve.get("/readyz"))?.status == 200
                }
                // Past the age of the last poll's check: the burst's first callers arrive together on a stale one.
                try await Task.sleep(for: .milliseconds(1_100))
                let started = ContinuousClock.now
                defer { polls.burst.withLock { $0 = ContinuousClock.now - started } }
                let answers = try await withThrowingTaskGroup(of: (String, Int).self) { group in
                    for index in 0..<100 {
                        group.addTask {
                            let path = index.isMultiple(of: 2) ? "/readyz" : "/metrics"
                            // The shared client queues a burst on a few connections: its deadline counts the wait.
                            return (path, try await serve.get(path, timeout: .seconds(60)).status)
                        }
                    }
                    return try await group.reduce(into: [(String, Int)]()) { $0.append($1) }
                }
                #expect(answers.allSatisfy { $0.1 == 200 }, "\(answers.filter { $0.1 != 200 })")
            }
            let startup = polls.value.withLock { $0 }
            // /readyz reads schema_migrations once per check; /metrics reads risc_events once per check. A check is
            // reused for a second: a burst that a loaded machine takes longer over may need one more each second.
            let burst = polls.burst.withLock { $0 }
            let perCheck = 2 + Int(burst / .seconds(1))
            #expect((scans["schema_migrations"] ?? 0) <= startup + perCheck, "\(scans), \(startup) polls before a burst of \(burst)")
            #expect((1...perCheck).contains(scans["risc_events"] ?? 0), "\(scans) in a burst of \(burst)")
        }
    }
}

private final class Tally: Sendable {
    let value = Mutex(0)
    let burst = Mutex(Duration.zero)
}
