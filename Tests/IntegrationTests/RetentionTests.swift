import DevTransmitter
import Foundation
import Logging
import PostgresNIO
import RISC
import RISCStore
import RISCWorker
import Testing

/// RISC_EVENT_RETENTION_DAYS: old finished events go, with their actions; nothing else does.
@Suite("Event retention")
struct RetentionTests {
    @Test(
        "Old done and ignored events go with their actions, in batches; waiting, dead, unreplayed shadow and recent ones stay; views still work; a recent SET is still a duplicate"
    )
    func deletesOldFinishedEvents() async throws {
        var options = Harness.Options()
        options.worker = true
        try await Harness.withIsolatedDatabase(options) { harness in
            let sub = "kept-\(UUID().uuidString.prefix(8))"
            let session = try await harness.newSession(sub: sub)
            // A subscriber: each action below is notified (no dispatcher runs, so the notifications wait).
            try await harness.database.query(
                "INSERT INTO risc_subscribers (url, secret) VALUES ('http://127.0.0.1:9/hook', 'whsec_cmV0ZW50aW9uLXRlc3Qtc2VjcmV0LTMyLWJ5dGVzIQ==')")
            // Three old events that are finished (two done, one ignored), and three that must stay: a recent one,
            // an old one still waiting for a worker, and an old dead one.
            let oldRevocation = try await harness.sendAndWait("sessions-revoked", sub: sub)
            let oldFlag = try await harness.sendAndWait("account-credential-change-required", sub: sub)
            let unknownType = try await harness.sign(harness.claims { $0["events"] = ["https://example.com/event-type/new": [:]] })
            #expect(try await harness.post(unknownType).status == 202)
            let recentToken = try await harness.makeSET("account-disabled", sub: sub)
            #expect(try await harness.post(recentToken).status == 202)
            let recent = jti(of: recentToken)
            try await harness.database.query(
                """
                INSERT INTO risc_events (issuer, jti, event_types, events, claims, issued_at, status, attempts, run_after)
                VALUES ('https://retention.test/', 'old-waiting', '{}', '[]', '{}', now(), 'retry', 1, now() + interval '1 hour'),
                       ('https://retention.test/', 'old-dead', '{}', '[]', '{}', now(), 'dead', 10, now())
                """)
            // Applied in shadow mode and never replayed: what it would do is still to be applied, so it stays.
            try await harness.database.query(
                """
                INSERT INTO risc_events (issuer, jti, event_types, events, claims, issued_at, status, attempts, run_after, shadow)
                VALUES ('https://retention.test/', 'old-shadow', '{}', '[]', '{}', now(), 'done', 1, now(), true)
                """)
            let old = [oldRevocation, oldFlag, jti(of: unknownType), "old-waiting", "old-dead", "old-shadow"]
            try await harness.database.query(
                "UPDATE risc_events SET received_at = now() - interval '401 days', run_after = now() + interval '1 hour' WHERE jti = ANY(\(old))")

            // The old events' notifications are as old: the revocation's was delivered, the flag's is dead (to replay).
            // The recent one was delivered just now.
            try await harness.database.query(
                """
                UPDATE risc_notifications SET status = CASE event_jti WHEN \(oldFlag) THEN 'dead' ELSE 'delivered' END,
                       created_at = CASE event_jti WHEN \(recent) THEN created_at ELSE now() - interval '401 days' END
                """)
            @Sendable func notifications() async throws -> [String: String] {
                var found: [String: String] = [:]
                for try await (jti, status) in try await harness.database.query("SELECT event_jti, status FROM risc_notifications").decode(
                    (String, String).self)
                {
                    found[jti] = status
                }
                return found
            }
            #expect(try await notifications() == [oldRevocation: "delivered", oldFlag: "dead", recent: "delivered"])

            var settings = EventRetention.Settings()
            settings.batchSize = 2  // three to delete: two batches, the second short
            settings.pause = .zero
            let retention = EventRetention(client: harness.database, settings: settings, logger: Harness.logger)
            #expect(try await retention.sweep() == 3)
            #expect(try await retention.sweep() == 0)

            var left: [String] = []
            for try await jti in try await harness.database.query("SELECT jti FROM risc_events ORDER BY id").decode(String.self) {
                left.append(jti)
            }
            #expect(Set(left) == [recent, "old-waiting", "old-dead", "old-shadow"])
            // The old delivered notification is gone; the dead one stays to be replayed, the recent one stays.
            #expect(try await notifications() == [oldFlag: "dead", recent: "delivered"])
            var orphans = -1
            for try await count in try await harness.database.query(
                "SELECT count(*)::int FROM risc_event_actions a WHERE NOT EXISTS (SELECT 1 FROM risc_events e WHERE e.id = a.event_id)"
            ).decode(Int.self) { orphans = count }
            #expect(orphans == 0)

            // What the deleted events did stays done: the session is still revoked, the flag still set.
            #expect(try await harness.checkSession(session).error == "session_revoked")
            let user = try await harness.call(.GET, "/admin/v1/users/\(sub)", bearer: Harness.adminToken)
            #expect(user.status == 200, "\(user.body)")
            let flags = user.json["flags"]?.arrayValue?.compactMap(\.stringValue) ?? []
            #expect(Set(flags) == ["credential_change_required", "sign_in_disabled"], "\(user.body)")
            #expect(try await harness.call(.GET, "/admin/v1/events?sub=\(sub)", bearer: Harness.adminToken).status == 200)
            let environment = ["DATABASE_URL": harness.databaseURL, "LOG_LEVEL": "warning"]
            let shown = try await runRiscReceiver(["users", "show", sub], environment: environment)
            #expect(shown.status == 0, "\(shown.output)")
            #expect(try await runRiscReceiver(["stats"], environment: environment).status == 0)

            // A redelivery of what is kept is still recognised: no second row, no second action.
            let actionsBefore = try await harness.actions(jti: recent)
            #expect(try await harness.post(recentToken).status == 202)
            #expect(try await harness.actions(jti: recent) == actionsBefore)
            var copies = 0
            for try await count in try await harness.database.query("SELECT count(*)::int FROM risc_events WHERE jti = \(recent)").decode(Int.self) {
                copies = count
            }
            #expect(copies == 1)
        }
    }

    @Test("0 keeps everything")
    func zeroKeepsEverything() async throws {
        try await IsolatedDatabase.with { database in
            try await database.seed(count: 3)
            try await database.client.query("UPDATE risc_events SET status = 'done', received_at = now() - interval '9000 days'")
            var settings = EventRetention.Settings()
            settings.days = 0
            settings.interval = .milliseconds(10)
            let retention = EventRetention(client: database.client, settings: settings, logger: Harness.logger)
            await retention.run()  // returns at once: nothing to do
            for try await count in try await database.client.query("SELECT count(*)::int FROM risc_events").decode(Int.self) {
                #expect(count == 3)
            }
        }
    }
}
