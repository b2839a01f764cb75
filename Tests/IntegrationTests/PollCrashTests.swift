import DevTransmitter
import Foundation
import PostgresNIO
import RISC
import RISCStore
import Testing

/// Poll delivery's promise under a crash: a SET is acknowledged only once it is committed, what is owed survives a
/// kill, and nothing is lost or applied twice. `serve` runs as a real process and is killed with SIGKILL.
@Suite("Poll delivery: acknowledgements survive a crash", .timeLimit(.minutes(3)))
struct PollCrashTests {
    /// A database of its own, the development transmitter with a poll stream at it, and the CLI's environment.
    static func withPollStream(
        _ body: @escaping @Sendable (IsolatedDatabase, DevTransmitter, [String: String]) async throws -> Void
    ) async throws {
        try await IsolatedDatabase.with { database in
            let transmitter = try await DevTransmitter(settings: .init(port: 0, audience: Harness.audience), logger: Harness.logger)
            try await serving(transmitter) {
                let environment = ["DATABASE_URL": database.url, "LOG_LEVEL": "warning", "RISC_VAULT_KEY": Harness.vaultKey]
                let added = try await runShell(
                    "printf '%s\\n' \"$1\" | \"$0\" transmitters add dev-ssf --issuer \"$2\" --client-id \"$3\" --client-secret - --delivery poll",
                    arguments: [
                        riscReceiverBinary, transmitter.sharedSignalsClientSecret, transmitter.sharedSignalsIssuer,
                        transmitter.sharedSignalsClientID,
                    ], environment: environment)
                #expect(added.status == 0, "\(added.output)")
                #expect(try await runRiscReceiver(["streams", "create", "dev-ssf"], environment: environment).status == 0)
                try await body(database, transmitter, environment)
            }
        }
    }

    static func devState(_ transmitter: DevTransmitter) async throws -> JSONValue {
        try await Client(base: transmitter.baseURL).send(.GET, "/dev/ssf/state").json.asValue
    }

    static func control(_ transmitter: DevTransmitter, _ query: String) async throws {
        #expect(try await Client(base: transmitter.baseURL).send(.POST, "/dev/ssf/poll-control?" + query).status == 200)
    }

    /// Queues a CAEP session-revoked about `sub` (Google's issuer) for the next poll, without waiting; its jti.
    static func queue(_ transmitter: DevTransmitter, sub: String) async throws -> String {
        let reply = try await Client(base: transmitter.baseURL).send(
            .POST, "/dev/ssf/send",
            json: [
                "type": "session-revoked", "wait": false,
                "sub_id": ["format": "iss_sub", "iss": "https://accounts.google.com", "sub": .string(sub)],
            ])
        return try #require(reply.json["jti"]?.stringValue)
    }

    /// How often the SET was stored, how many actions were recorded for it, and whether an acknowledgement is owed.
    static func recorded(_ database: IsolatedDatabase, jti: String) async throws -> (stored: Int, actions: Int, owed: Int) {
        var counts = (0, 0, 0)
        for try await (stored, actions, owed) in try await database.client.query(
            """
            SELECT (SELECT count(*) FROM risc_events WHERE jti = \(jti))::int8,
                   (SELECT count(*) FROM risc_event_actions a JOIN risc_events e ON e.id = a.event_id WHERE e.jti = \(jti))::int8,
                   (SELECT count(*) FROM risc_poll_acks WHERE jti = \(jti) AND error_code IS NULL)::int8
            """, logger: Harness.logger
        ).decode((Int64, Int64, Int64).self) {
            counts = (Int(stored), Int(actions), Int(owed))
        }
        return counts
    }

    @Test("Killed between a SET's commit and the poll that acknowledges it: the next serve sends the acknowledgement")
    func killedAfterCommit() async throws {
        try await Self.withPollStream { database, transmitter, _ in
            // The poll after the one that brings the SET is refused: its acknowledgement cannot get through.
            try await Self.control(transmitter, "refuse_after_delivery=true")
            let first = try ServeProcess.start(databaseURL: database.url, transmitter: transmitter)
            try await first.waitUntilReady()
            let jti = try await Self.queue(transmitter, sub: "crash-\(UUID().uuidString)")
            try await eventually("the SET is committed and its acknowledgement owed") {
                let now = try await Self.recorded(database, jti: jti)
                return now.stored == 1 && now.owed == 1
            }
            first.stop()  // SIGKILL
            let atKill = try await Self.devState(transmitter)
            #expect(atKill["acknowledged"]?.arrayValue?.contains(.string(jti)) == false, "not acknowledged before the kill")

            try await Self.control(transmitter, "refuse=false")
            let second = try ServeProcess.start(databaseURL: database.url, transmitter: transmitter)
            defer { second.stop() }
            try await second.waitUntilReady()
            try await eventually("the next serve acknowledges it") {
                try await Self.devState(transmitter)["acknowledged"]?.arrayValue?.contains(.string(jti)) == true
            }
            let after = try await Self.recorded(database, jti: jti)
            #expect(after.stored == 1 && after.actions == 1, "stored and applied once: \(after)")
            try await eventually("nothing is owed any more") { try await Self.recorded(database, jti: jti).owed == 0 }
            #expect(try await Self.devState(transmitter)["queued"]?.arrayValue?.isEmpty == true)
        }
    }

    @Test("Killed between receiving a SET and committing it: never acknowledged, taken again by the next serve, stored once")
    func killedBeforeCommit() async throws {
        try await Self.withPollStream { database, transmitter, _ in
            let first = try ServeProcess.start(databaseURL: database.url, transmitter: transmitter)
            try await first.waitUntilReady()
            // Nothing can be stored while this transaction holds the events table.
            let lock = PostgresClient(configuration: try DatabaseURL.configuration(from: database.url), backgroundLogger: Harness.logger)
            let jti = try await lock.whileRunning(timeout: .seconds(120)) { lock in
                try await lock.withConnection { connection in
                    try await connection.query("BEGIN", logger: Harness.logger)
                    try await connection.query("LOCK TABLE risc_events IN EXCLUSIVE MODE", logger: Harness.logger)
                    let jti = try await Self.queue(transmitter, sub: "crash-\(UUID().uuidString)")
                    try await eventually("a poll has returned the SET") {
                        try await Self.devState(transmitter)["offered"]?.arrayValue?.contains(.string(jti)) == true
                    }
                    try await Task.sleep(for: .milliseconds(300))
                    first.stop()  // SIGKILL, with the SET received and its commit waiting
                    try await connection.query("ROLLBACK", logger: Harness.logger)
                    return jti
                }
            }
            // The killed process's insert may still commit once the lock goes (PostgreSQL finishes a statement whose
            // client is gone): then the SET is stored and not acknowledged, which the redelivery below settles too.
            let atKill = try await Self.recorded(database, jti: jti)
            #expect(atKill.owed == 0, "nothing owed: the poller died before the outcome was final: \(atKill)")
            #expect(try await Self.devState(transmitter)["acknowledged"]?.arrayValue?.contains(.string(jti)) == false)

            let second = try ServeProcess.start(databaseURL: database.url, transmitter: transmitter)
            defer { second.stop() }
            try await second.waitUntilReady()
            try await eventually("the transmitter offers it again and it is acknowledged") {
                try await Self.devState(transmitter)["acknowledged"]?.arrayValue?.contains(.string(jti)) == true
            }
            let after = try await Self.recorded(database, jti: jti)
            #expect(after.stored == 1 && after.actions == 1, "stored and applied once: \(after)")
        }
    }

    @Test("What is owed: an ack replaces an owed error, an unknown code is still an error, one bad row loses no other, a new stream owes nothing")
    func owed() async throws {
        try await Self.withPollStream { database, transmitter, environment in
            let acks = PollAcks(client: database.client, logger: Harness.logger)
            let name = try TransmitterName(naming: "dev-ssf")
            try await acks.record([PollAcks.Outcome(jti: "later-valid", error: .invalidRequest("a first copy was malformed"))], for: name)
            // Text PostgreSQL cannot hold in an index (a jti of 14,400 random characters) beside two good outcomes.
            let huge = (0..<400).map { _ in UUID().uuidString }.joined()
            try await acks.record([PollAcks.Outcome(jti: "later-valid"), PollAcks.Outcome(jti: huge), PollAcks.Outcome(jti: "fine")], for: name)
            _ = try await database.client.query(
                "INSERT INTO risc_poll_acks (transmitter, jti, error_code, description) VALUES ('dev-ssf', 'future', 'from_a_newer_version', 'd')",
                logger: Harness.logger)
            let (owedAcks, owedErrors) = try await acks.owed(to: name)
            #expect(Set(owedAcks) == ["later-valid", "fine"], "\(owedAcks)")
            #expect(owedErrors.keys.sorted() == ["future"] && owedErrors["future"]?.code == .invalidRequest, "\(owedErrors)")
            // A stream deleted: what was owed to it goes with it.
            #expect(try await runRiscReceiver(["streams", "delete", "dev-ssf"], environment: environment).status == 0)
            let afterDelete = try await acks.owed(to: name)
            #expect(afterDelete.acks.isEmpty && afterDelete.errors.isEmpty)
        }
    }

    @Test("A transmitter that answers every poll at once, empty, is polled about once a second, not in a loop")
    func idlePolls() async throws {
        try await Self.withPollStream { database, transmitter, _ in
            try await Self.control(transmitter, "long_poll=0")
            let serve = try ServeProcess.start(databaseURL: database.url, transmitter: transmitter)
            defer { serve.stop() }
            try await serve.waitUntilReady()
            try await eventually("the stream is polled") { (try await Self.devState(transmitter)["polls"]?.number ?? 0) > 0 }
            let before = try await Self.devState(transmitter)["polls"]?.number ?? 0
            try await Task.sleep(for: .seconds(4))
            let polls = (try await Self.devState(transmitter)["polls"]?.number ?? 0) - before
            #expect(polls >= 2 && polls <= 8, "\(polls) polls in 4 s")
        }
    }
}
