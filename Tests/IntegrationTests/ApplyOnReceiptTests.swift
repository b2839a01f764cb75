import DevTransmitter
import Foundation
import PostgresNIO
import RISC
import RISCStore
import Testing

/// `serve` with its worker applies a new event in the transaction that stores it: the 202 comes
/// after the revocation has committed, so a revocation never waits behind a backlog.
@Suite("Events applied on receipt")
struct ApplyOnReceiptTests {
    static var options: Harness.Options {
        var options = Harness.Options()
        options.worker = true
        return options
    }

    @Test("The 202 comes after the revocation: the session is refused at once, and the event is stored done")
    func revokedBeforeTheAnswer() async throws {
        try await Harness.with(Self.options) { harness in
            let sub = "receipt-\(UUID().uuidString.prefix(8))"
            let session = try await harness.newSession(sub: sub)
            #expect(try await harness.checkSession(session).status == 200)
            let jti = try await harness.send("sessions-revoked", sub: sub)
            // No waiting: the revocation committed before the 202.
            #expect(try await harness.checkSession(session).error == "session_revoked")
            let rows = try await harness.database.query(
                "SELECT status, attempts, completed_at IS NOT NULL FROM risc_events WHERE jti = \(jti)")
            var found = false
            for try await (status, attempts, completed) in rows.decode((String, Int32, Bool).self) {
                found = true
                #expect(status == "done")
                #expect(attempts == 1)
                #expect(completed)
            }
            #expect(found)
            #expect(try await harness.actions(jti: jti) == [.init(kind: "revoke_sessions", rows: 1)])
        }
    }

    @Test("Concurrent copies of one SET: one row, its actions recorded once, every copy answered 202")
    func concurrentCopies() async throws {
        try await Harness.with(Self.options) { harness in
            let sub = "copies-\(UUID().uuidString.prefix(8))"
            _ = try await harness.newSession(sub: sub)
            let token = try await harness.transmitter.makeSET(SETRequest(type: "tokens-revoked", sub: sub))
            let statuses = try await withThrowingTaskGroup(of: Int.self) { group in
                for _ in 0..<20 {
                    group.addTask { try await harness.post(token).status }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(statuses == Array(repeating: 202, count: 20))
            #expect(
                try await harness.actions(jti: jti(of: token)) == [
                    .init(kind: "revoke_sessions", rows: 1), .init(kind: "delete_grants", rows: 0),
                ])
        }
    }

    @Test("If applying fails, the batch is stored pending and the worker retries it: nothing is lost")
    func failureLeavesItToTheWorker() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            // Any change to this user fails, on receipt and in the worker alike.
            let doomed = "doomed-\(UUID().uuidString.prefix(8))"
            try await harness.database.query(
                "CREATE FUNCTION test_refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$")
            try await harness.database.query(
                PostgresQuery(
                    unsafeSQL: """
                        CREATE TRIGGER test_refuse BEFORE INSERT OR UPDATE ON risc_users FOR EACH ROW
                            WHEN (NEW.sub = '\(doomed)') EXECUTE FUNCTION test_refuse()
                        """))
            let jti = try await harness.send("sessions-revoked", sub: doomed)
            #expect(try await harness.waitUntilStatus(jti: jti, in: ["retry", "dead"]))
            let rows = try await harness.database.query("SELECT attempts, last_error FROM risc_events WHERE jti = \(jti)")
            for try await (attempts, error) in rows.decode((Int32, String?).self) {
                #expect(attempts >= 1)
                #expect(error?.isEmpty == false)
            }
            #expect(try await harness.actions(jti: jti).isEmpty)
            // Once the cause is gone, a replay applies it.
            try await harness.database.query("DROP TRIGGER test_refuse ON risc_users")
            let replayed = try await harness.call(.POST, "/admin/v1/events/\(try await harness.eventID(jti: jti))/replay", bearer: Harness.adminToken)
            #expect(replayed.status == 202, "\(replayed.body)")
            #expect(try await harness.waitUntilProcessed(jti: jti) == "done")
            // Once or twice: the worker's own retry may also come due after the trigger is gone.
            let actions = try await harness.actions(jti: jti)
            #expect(!actions.isEmpty && actions.allSatisfy { $0 == .init(kind: "revoke_sessions", rows: 0) }, "\(actions)")
        }
    }

    @Test("serve --no-worker leaves every event to a worker")
    func noWorkerStoresPending() async throws {
        var options = Harness.Options()
        options.worker = false
        // A database of its own: another test's worker would take the event.
        try await Harness.withIsolatedDatabase(options) { harness in
            let jti = try await harness.send("sessions-revoked", sub: "later-\(UUID().uuidString.prefix(8))")
            let rows = try await harness.database.query("SELECT status FROM risc_events WHERE jti = \(jti)")
            for try await status in rows.decode(String.self) { #expect(status == "pending") }
            #expect(try await harness.actions(jti: jti).isEmpty)
        }
    }
}

extension Harness {
    func eventID(jti: String) async throws -> Int64 {
        for try await id in try await database.query("SELECT id FROM risc_events WHERE jti = \(jti)").decode(Int64.self) { return id }
        throw EventMissing()
    }

    struct EventMissing: Error {}

    /// Waits (bounded) until the event with this jti has one of the statuses.
    func waitUntilStatus(jti: String, in statuses: [String], timeout: Duration = .seconds(30)) async throws -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            for try await status in try await database.query("SELECT status FROM risc_events WHERE jti = \(jti)").decode(String.self)
            where statuses.contains(status) {
                return true
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        return false
    }
}
