import DevTransmitter
import Foundation
import PostgresNIO
import RISC
import RISCStore
import Testing

/// The hot paths run prepared statements: the SETs' batch, the session check, the dispatcher's claim and record.
/// postgres-nio 1.33.2 keeps a statement whose preparation failed failed on its connection, answering every later
/// call with that error without asking the server. Here each preparation is refused once (what it reads is renamed
/// for a moment), on a pool of one connection, so that a connection kept failing would take every later call.
@Suite("Prepared statements")
struct PreparedStatementTests {
    /// A client of one connection to `url` while `body` runs.
    static func withOneConnection(_ url: String, _ body: @escaping @Sendable (PostgresClient) async throws -> Void) async throws {
        var configuration = try DatabaseURL.configuration(from: url)
        configuration.options.maximumConnections = 1
        let client = PostgresClient(configuration: configuration, backgroundLogger: Harness.logger)
        try await client.whileRunning(timeout: .seconds(120)) { client in try await body(client) }
    }

    /// Every procedure named `from` (any signature) renamed `to`.
    static func renameProcedures(from: String, to: String, on client: PostgresClient) async throws {
        try await client.query(
            PostgresQuery(
                unsafeSQL: """
                    DO $$ DECLARE p regprocedure; BEGIN
                        FOR p IN SELECT oid::regprocedure FROM pg_proc WHERE proname = '\(from)' AND prokind = 'p' LOOP
                            EXECUTE format('ALTER PROCEDURE %s RENAME TO \(to)', p);
                        END LOOP;
                    END $$
                    """))
    }

    @Test("A session check whose preparation was refused once works again once the table is back")
    func sessionCheck() async throws {
        try await IsolatedDatabase.with { database in
            try await Self.withOneConnection(database.url) { client in
                let sessions = SessionStore(client: client, databaseTimeout: .seconds(30), logger: Harness.logger)
                let (token, sub) = ("prepared-\(UUID().uuidString)", "prepared-\(UUID().uuidString)")
                try await database.client.query("INSERT INTO risc_users (sub) VALUES (\(sub))")
                try await database.client.query(
                    """
                    INSERT INTO risc_sessions (token_hash, sub, expires_at)
                    VALUES (\(SessionStore.tokenHash(token)), \(sub), now() + interval '1 day')
                    """)
                try await database.client.query("ALTER TABLE risc_sessions RENAME TO risc_sessions_away")
                await #expect(throws: PSQLError.self) { _ = try await sessions.lookup(token: token) }
                try await database.client.query("ALTER TABLE risc_sessions_away RENAME TO risc_sessions")
                guard case .valid(let user, _, _, _) = try await sessions.lookup(token: token) else {
                    Issue.record("the session check still fails after its table is back")
                    return
                }
                #expect(user.sub == sub)
            }
        }
    }

    @Test("The dispatcher's claim and record, refused once each, work again once the lease table is back")
    func claimAndRecord() async throws {
        try await IsolatedDatabase.with { database in
            try await Self.withOneConnection(database.url) { client in
                let outbox = NotificationOutbox(client: client, timeout: .seconds(30), logger: Harness.logger)
                let outcome: (id: Int64, attempt: Int, outcome: NotificationOutbox.Outcome) = (1, 1, .delivered)
                try await database.client.query("ALTER TABLE risc_notification_leases RENAME TO risc_notification_leases_away")
                await #expect(throws: PSQLError.self) { _ = try await outbox.claim(subscriber: 1, limit: 4, lease: .seconds(30)) }
                await #expect(throws: PSQLError.self) { try await outbox.record([outcome]) }
                try await database.client.query("ALTER TABLE risc_notification_leases_away RENAME TO risc_notification_leases")
                // Nothing is due and nothing is leased: each answers, with nothing.
                #expect(try await outbox.claim(subscriber: 1, limit: 4, lease: .seconds(30)).isEmpty)
                #expect(try await outbox.record([outcome]) == 0)
            }
        }
    }

    @Test("The SETs' batch, refused once, stores again once its procedure is back")
    func storeEvents() async throws {
        let audience = "prepared-client"
        let transmitter = try await DevTransmitter(settings: .init(port: 0, audience: audience), logger: Harness.logger)
        @Sendable func event() async throws -> InboundEvent {
            let compact = try await transmitter.makeSET(SETRequest(type: "sessions-revoked", sub: "prepared-\(UUID().uuidString)"))
            return InboundEvent(token: try SecurityEventToken.parse(compact: compact, policy: SETPolicy(audiences: [audience]), now: Date()))
        }
        try await IsolatedDatabase.with { database in
            try await Self.withOneConnection(database.url) { client in
                var settings = EventInbox.Settings()
                settings.commitTimeout = .seconds(30)
                let inbox = EventInbox(client: client, settings: settings, logger: Harness.logger)
                try await whileRunning([inbox]) {
                    try await Self.renameProcedures(from: "risc_ingest_batch", to: "risc_ingest_batch_away", on: database.client)
                    let refused = try await event()
                    await #expect(throws: EventInbox.Failure.unavailable) { _ = try await inbox.store(refused) }
                    try await Self.renameProcedures(from: "risc_ingest_batch_away", to: "risc_ingest_batch", on: database.client)
                    #expect(try await inbox.store(try await event()) == .stored)
                    #expect(try await inbox.store(refused) == .stored)
                }
            }
        }
    }
}
