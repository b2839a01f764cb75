import DevTransmitter
import Foundation
import PostgresNIO
import RISC
import RISCStore
import Testing

/// What an operator rolling out in shadow mode sees, with real `serve` processes: first RISC_ENFORCE=false, then
/// the default, on one database.
@Suite("Shadow mode", .timeLimit(.minutes(4)))
struct ShadowModeTests {
    @Test(
        "RISC_ENFORCE=false changes no session, grant, account or notification and records shadow actions; explain, then replay --since once enforcing, applies them in order"
    )
    func shadowThenEnforce() async throws {
        let subscriber = TestSubscriber()
        try await subscriber.serving { hookURL in
            try await IsolatedDatabase.with { database in
                let transmitter = try await DevTransmitter(settings: .init(port: 0, audience: Harness.audience), logger: Harness.logger)
                try await serving(transmitter) {
                    try await Self.rollOut(database: database, transmitter: transmitter, subscriber: subscriber, hookURL: hookURL)
                }
            }
        }
    }

    /// The one function decides in both modes: what a shadow action counts must be what the enforcing call changes.
    @Test("Kind by kind, a shadow action counts the rows the enforcing call then changes, and changes none of them")
    func shadowCountsWhatEnforcingChanges() async throws {
        try await Harness.with { harness in
            let sub = try await Self.userWithTwoSessions(harness, prefix: "shadow-count")
            // Two grants sharing a 16-character prefix: token-revoked by prefix erases both, and is flagged ambiguous.
            let prefix = String(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16))
            for n in 1...2 { _ = try await harness.storeGrant(sub: sub, refreshToken: prefix + "-\(n)-\(UUID().uuidString)") }
            let id = try await Self.doneEvent(harness, sub: sub)
            let actions: JSONValue = .array(
                [
                    ("revoke_sessions", sub as String?, nil as String?), ("delete_grant_by_prefix", nil, prefix),
                    ("disable_sign_in", sub, "hijacking"), ("flag_for_review", sub, nil), ("require_credential_change", sub, nil),
                ].enumerated().map { position, action in
                    [
                        "event": .number(Double(id)), "position": .number(Double(position)), "kind": .string(action.0),
                        "sub": action.1.map(JSONValue.string) ?? .null, "argument": action.2.map(JSONValue.string) ?? .null,
                        "client_ids": [.string(Harness.audience)],
                    ]
                })
            @Sendable func apply(enforce: Bool) async throws -> [String] {
                let before = try #require(
                    try await harness.database.query("SELECT coalesce(max(id), 0)::int8 FROM risc_event_actions").collect().first?.decode(Int64.self))
                _ = try await harness.database.query(
                    "SELECT count(*) FROM risc_apply_actions(\(actions.serialized)::jsonb, NULL, '{}', \(enforce))"
                ).collect()
                var recorded: [String] = []
                for try await (kind, count, shadow) in try await harness.database.query(
                    "SELECT kind, rows_affected, shadow FROM risc_event_actions WHERE event_id = \(id) AND id > \(before) ORDER BY id"
                ).decode((String, Int32, Bool).self) {
                    #expect(shadow == !enforce)
                    recorded.append("\(kind):\(count)")
                }
                return recorded
            }
            @Sendable func state() async throws -> String {
                let rows = try await harness.database.query(
                    """
                    SELECT (SELECT count(*) FROM risc_sessions WHERE sub = \(sub) AND revoked_at IS NULL)::int8,
                           (SELECT count(*) FROM risc_grants WHERE sub = \(sub) AND revoked_at IS NULL)::int8,
                           (SELECT row(sign_in_disabled, review_required, credential_change_required, sessions_revoked_before)::text
                              FROM risc_users WHERE sub = \(sub))
                    """
                ).collect()
                let (sessions, grants, user) = try #require(rows.first).decode((Int64, Int64, String?).self)
                return "\(sessions) \(grants) \(user ?? "-")"
            }

            let untouched = try await state()
            let shadow = try await apply(enforce: false)
            #expect(try await state() == untouched)
            #expect(
                Set(shadow) == [
                    "revoke_sessions:2", "delete_grant_by_prefix:2", "ambiguous_token_identifier:2", "disable_sign_in:1",
                    "flag_for_review:1", "require_credential_change:1",
                ], "\(shadow)")
            let enforced = try await apply(enforce: true)
            #expect(enforced == shadow)
            #expect(try await state() != untouched)
            // And after it, shadow and enforcing agree again: the state is newer for nothing but the same event.
            #expect(try await apply(enforce: false) == (try await apply(enforce: true)))
        }
    }

    /// What an action decides, it changes: a row another transaction changes while the batch waits for it is read
    /// again against the deciding condition, so it is neither counted nor changed a second time.
    @Test("A session revoked by another transaction while a batch waits for its row is neither counted nor revoked again")
    func rowChangedWhileDeciding() async throws {
        try await Harness.with { harness in
            let sub = try await Self.userWithTwoSessions(harness, prefix: "decided")
            let id = try await Self.doneEvent(harness, sub: sub)
            let actions: JSONValue = [
                [
                    "event": .number(Double(id)), "position": 0, "kind": "revoke_sessions", "sub": .string(sub), "argument": .null,
                    "client_ids": [],
                ]
            ]
            try await harness.database.withConnection { other in
                let otherPID = try #require(
                    try await other.query("SELECT pg_backend_pid()", logger: Harness.logger).collect().first?.decode(Int32.self))
                try await other.query("BEGIN", logger: Harness.logger)
                // Revoked by someone else, not yet committed: the batch finds this row locked, and waits.
                try await other.query(
                    "UPDATE risc_sessions SET revoked_at = now() WHERE id = (SELECT min(id) FROM risc_sessions WHERE sub = \(sub))",
                    logger: Harness.logger)
                let batch = Task {
                    try await harness.database.query(
                        "SELECT count(*) FROM risc_apply_actions(\(actions.serialized)::jsonb, NULL, '{}', true)"
                    ).collect().count
                }
                try await eventually("the batch waits for the locked session") {
                    let waiting = try await harness.database.query(
                        "SELECT count(*)::int8 FROM pg_stat_activity WHERE \(otherPID) = ANY (pg_blocking_pids(pid))"
                    ).collect()
                    return try waiting.first?.decode(Int64.self) ?? 0 > 0
                }
                try await other.query("COMMIT", logger: Harness.logger)
                _ = try await batch.value
            }
            let rows = try await harness.database.query(
                """
                SELECT (SELECT rows_affected FROM risc_event_actions WHERE event_id = \(id) AND kind = 'revoke_sessions')::int8,
                       (SELECT count(*) FROM risc_sessions WHERE revoked_by_event = \(id))::int8,
                       (SELECT count(*) FROM risc_sessions WHERE sub = \(sub) AND revoked_at IS NULL)::int8
                """
            ).collect()
            let (counted, revokedByBatch, live) = try #require(rows.first).decode((Int64?, Int64, Int64).self)
            #expect(counted == 1, "the batch counted the session another transaction revoked")
            #expect(revokedByBatch == 1, "the batch revoked the other transaction's session again")
            #expect(live == 0)
        }
    }

    /// Lone revocations are decided for the whole batch at once, the rest one by one: both must count what they end,
    /// and end it only when enforcing.
    @Test("A batch of many users' revocations, one user twice: each action counts and ends its own sessions, shadow or not")
    func batchOfRevocations() async throws {
        try await Harness.with { harness in
            let lone = try await (0..<3).asyncMap { n in try await Self.userWithTwoSessions(harness, prefix: "lone-\(n)") }
            let twice = try await Self.userWithTwoSessions(harness, prefix: "twice")
            let nobody = "no-sessions-\(UUID().uuidString)"
            let events = try await (lone + [twice, twice, nobody]).asyncMap { sub in (sub: sub, id: try await Self.doneEvent(harness, sub: sub)) }
            let actions: JSONValue = .array(
                events.map { event in
                    [
                        "event": .number(Double(event.id)), "position": 0, "kind": "revoke_sessions", "sub": .string(event.sub),
                        "argument": .null, "client_ids": [],
                    ]
                })
            @Sendable func apply(enforce: Bool) async throws -> [String] {
                _ = try await harness.database.query(
                    "SELECT count(*) FROM risc_apply_actions(\(actions.serialized)::jsonb, NULL, '{}', \(enforce))"
                ).collect()
                var recorded: [String] = []
                for event in events {
                    for try await (count, shadow) in try await harness.database.query(
                        "SELECT rows_affected, shadow FROM risc_event_actions WHERE event_id = \(event.id) ORDER BY id DESC LIMIT 1"
                    ).decode((Int32, Bool).self) {
                        #expect(shadow == !enforce)
                        recorded.append("\(event.sub.prefix(6)):\(count)")
                    }
                }
                return recorded
            }
            @Sendable func live() async throws -> [Int64] {
                var counts: [Int64] = []
                for sub in lone + [twice, nobody] {
                    counts.append(
                        try #require(
                            try await harness.database.query(
                                "SELECT count(*)::int8 FROM risc_sessions WHERE sub = \(sub) AND revoked_at IS NULL"
                            ).collect().first?.decode(Int64.self)))
                }
                return counts
            }
            let expected = ["lone-0:2", "lone-1:2", "lone-2:2", "twice-:2", "twice-:0", "no-ses:0"]
            // A shadow action changed nothing, so the user's second revocation finds both sessions still live.
            let shadow = try await apply(enforce: false)
            #expect(shadow == ["lone-0:2", "lone-1:2", "lone-2:2", "twice-:2", "twice-:2", "no-ses:0"])
            #expect(try await live() == [2, 2, 2, 2, 0], "shadow mode changed nothing")
            let enforced = try await apply(enforce: true)
            #expect(enforced == expected)
            #expect(try await live() == [0, 0, 0, 0, 0])
            for event in events.prefix(4) {
                let revoked = try #require(
                    try await harness.database.query(
                        "SELECT count(*)::int8 FROM risc_sessions WHERE revoked_by_event = \(event.id)"
                    ).collect().first?.decode(Int64.self))
                #expect(revoked == 2, "each session names the event that ended it")
            }
            // Every user named, sessions or not, is refused the ID tokens issued up to its event's arrival.
            let barred = try #require(
                try await harness.database.query(
                    "SELECT count(*)::int8 FROM risc_users WHERE sub = ANY (\(lone + [twice, nobody])) AND sessions_revoked_before IS NOT NULL"
                ).collect().first?.decode(Int64.self))
            #expect(barred == 5)
        }
    }

    /// A new user with two live sessions; its sub.
    static func userWithTwoSessions(_ harness: Harness, prefix: String) async throws -> String {
        let sub = "\(prefix)-\(UUID().uuidString)"
        for _ in 0..<2 { _ = try await harness.newSession(sub: sub) }
        return sub
    }

    /// A stored event about `sub`, already done: the event that actions passed to `risc_apply_actions` name.
    static func doneEvent(_ harness: Harness, sub: String) async throws -> Int64 {
        try #require(
            try await harness.database.query(
                """
                INSERT INTO risc_events (issuer, jti, event_types, subject_sub, events, claims, issued_at, status)
                VALUES ('https://shadow.test', \("event-" + UUID().uuidString), '{}', \(sub), '[]', '{}', now(), 'done') RETURNING id
                """
            ).collect().first?.decode(Int64.self))
    }

    static func metrics(_ client: Client) async throws -> [String: Double] {
        var values: [String: Double] = [:]
        for line in try await client.send(.GET, "/metrics").body.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            values[String(line[..<space])] = value
        }
        return values
    }

    static func rollOut(database: IsolatedDatabase, transmitter: DevTransmitter, subscriber: TestSubscriber, hookURL: String) async throws {
        let sub = "shadow-\(UUID().uuidString)"
        let start = Date(timeIntervalSinceNow: -5)
        let cli = ["DATABASE_URL": database.url, "LOG_LEVEL": "warning"]
        @Sendable func signIn(_ client: Client) async throws -> Harness.Reply {
            var request = IDTokenRequest(sub: sub)
            request.iat = Date().timeIntervalSince1970.rounded(.down)
            let token = try await transmitter.makeIDToken(request)
            return try await client.send(.POST, "/tokensignin", body: "idtoken=\(token)", contentType: "application/x-www-form-urlencoded")
        }
        /// A session's token, from a sign-in that must succeed.
        @Sendable func newSession(_ client: Client) async throws -> String {
            let signedIn = try await signIn(client)
            #expect(signedIn.status == 200, "\(signedIn.body)")
            return try #require(signedIn.json["session_token"]?.stringValue)
        }
        /// A grant stored for the user, and its answer.
        @Sendable func storeGrant(_ client: Client, token: String) async throws -> Harness.Reply {
            let grant = try await client.send(
                .POST, "/v1/grants", bearer: Harness.serviceToken,
                json: ["sub": .string(sub), "refresh_token": .string(token), "client_id": .string(Harness.audience)])
            #expect(grant.status == 201)
            return grant
        }
        @Sendable func user(_ client: Client) async throws -> [String: JSONValue] {
            try await client.send(.GET, "/admin/v1/users/\(sub)", bearer: Harness.adminToken).json
        }

        // Shadow mode.
        let shadow = try ServeProcess.start(databaseURL: database.url, transmitter: transmitter, environment: ["RISC_ENFORCE": "false"])
        var shadowStopped = false
        defer { if !shadowStopped { shadow.stop() } }
        try await shadow.waitUntilReady()
        let client = Client(base: shadow.url)
        let session = try await newSession(client)
        _ = try await storeGrant(client, token: "1//shadow-\(UUID().uuidString)")
        let added = try await client.send(
            .POST, "/admin/v1/subscribers", bearer: Harness.adminToken,
            json: ["url": .string(hookURL), "secret": .string(subscriber.secret)])
        #expect(added.status == 201, "\(added.body)")

        // tokens-revoked; a hijacking; then an older account-enabled, delivered last.
        let issued = Date().timeIntervalSince1970.rounded(.down)
        var jtis: [String] = []
        for (type, reason, iat) in [
            ("tokens-revoked", nil, issued), ("account-disabled", "hijacking", issued), ("account-enabled", nil, issued - 60),
        ] {
            var request = SETRequest(type: type, sub: sub)
            request.reason = reason
            request.iat = iat
            request.jti = "shadow-\(UUID().uuidString)"
            jtis.append(request.jti!)
            let reply = try await client.send(
                .POST, "/risc/events", body: try await transmitter.makeSET(request), contentType: "application/secevent+jwt")
            #expect(reply.status == 202, "\(reply.body)")
        }
        let page = try await client.send(.GET, "/admin/v1/events?sub=\(sub)", bearer: Harness.adminToken).json
        let ids = (page["events"]?.arrayValue ?? []).compactMap { $0["id"]?.number.map(Int64.init) }.sorted()
        try #require(ids.count == 3)

        // Nothing changed: the session checks, the grant is there, sign-in works, no notification was queued.
        #expect(try await client.send(.GET, "/v1/session", bearer: session).status == 200)
        #expect(try await signIn(client).status == 200)
        var account = try await user(client)
        #expect(account["flags"] == [])
        #expect(account["sessions"]?["revoked"] == 0)
        #expect(account["grants"]?["active"] == 1)
        let queued = try await database.client.query("SELECT count(*)::int8 FROM risc_notifications").collect()
        #expect(try queued.first?.decode(Int64.self) == 0)

        // The actions are recorded as shadow actions, with the rows they would have changed.
        let revoked = try await client.send(.GET, "/admin/v1/events/\(ids[0])", bearer: Harness.adminToken).json
        #expect(revoked["shadow"] == true)
        let shadowActions = (revoked["actions"]?.arrayValue ?? []).map {
            "\($0["kind"]?.stringValue ?? ""):\($0["rows_affected"]?.number ?? -1):\($0["shadow"] == true)"
        }
        #expect(shadowActions == ["revoke_sessions:1.0:true", "delete_grants:1.0:true"])
        let stats = try await client.send(.GET, "/admin/v1/stats", bearer: Harness.adminToken).json
        #expect(stats["mode"] == "shadow")
        #expect(stats["shadow_events"] == 3)
        let cliStats = try await runRiscReceiver(["stats"], environment: cli.merging(["RISC_ENFORCE": "false"]) { $1 })
        #expect(cliStats.output.contains("mode          shadow") && cliStats.output.contains("shadow events 3"), "\(cliStats.output)")
        let shown = try await runRiscReceiver(["events", "show", String(ids[0])], environment: cli)
        #expect(shown.output.contains("revoke_sessions") && shown.output.contains("shadow"), "\(shown.output)")
        var values = try await metrics(client)
        #expect(values["risc_enforce"] == 0)
        // The two revocations each counted the one session; nothing was counted as revoked.
        #expect(values["risc_shadow_sessions_revoked_total"] == 2)
        #expect(values["risc_shadow_grants_deleted_total"] == 1)
        #expect(values["risc_sessions_revoked_total"] == nil)

        // Explain: what a replay would do now, and nothing is written.
        let actionsBefore = try await database.client.query("SELECT count(*)::int8 FROM risc_event_actions").collect().first?.decode(Int64.self)
        let explained = try await client.send(.GET, "/admin/v1/events/\(ids[1])/explain", bearer: Harness.adminToken)
        #expect(explained.status == 200)
        #expect(explained.json["mode"] == "shadow")
        let explainedActions = (explained.json["actions"]?.arrayValue ?? []).map {
            "\($0["kind"]?.stringValue ?? ""):\($0["rows_affected"]?.number ?? -1)"
        }
        #expect(explainedActions == ["disable_sign_in:1.0", "revoke_sessions:1.0"])
        let actionsAfter = try await database.client.query("SELECT count(*)::int8 FROM risc_event_actions").collect().first?.decode(Int64.self)
        #expect(actionsBefore == actionsAfter)
        #expect(try await client.send(.GET, "/v1/session", bearer: session).status == 200)
        #expect(try await client.send(.GET, "/admin/v1/events/999999/explain", bearer: Harness.adminToken).status == 404)
        shadowStopped = true
        shadow.stop()
        #expect(subscriber.deliveries.isEmpty)

        // Enforcing: nothing is applied by itself. A barrier: an event left waiting before the enforcing process
        // starts (a verification: it touches no user). Its worker's first pass claims the waiting events in
        // (run_after, id) order, so the shadow events, stored before it, would be taken with it or before it, were a
        // worker to take them; and a claim of them still running in the other loop holds their rows' locks, which the
        // FOR UPDATE below waits for.
        let barrier = "shadow-barrier-\(UUID().uuidString)"
        let barrierEvents = JSONValue.array([["type": .string(EventType.verification.rawValue), "state": "barrier"]]).serialized
        try await database.client.query(
            """
            INSERT INTO risc_events (issuer, jti, event_types, subject_sub, events, claims, issued_at, status)
            VALUES (\(transmitter.issuer), \(barrier), \([EventType.verification.rawValue]), NULL, \(barrierEvents)::jsonb, '{}', now(), 'pending')
            """)
        let enforcing = try ServeProcess.start(databaseURL: database.url, transmitter: transmitter)
        defer { enforcing.stop() }
        try await enforcing.waitUntilReady()
        let live = Client(base: enforcing.url)
        try await eventually("the enforcing worker's first pass applies the barrier") {
            try await database.client.query("SELECT status FROM risc_events WHERE jti = \(barrier)").collect().first?.decode(String.self) == "done"
        }
        _ = try await database.client.query("SELECT id FROM risc_events WHERE id = ANY(\(ids)) FOR UPDATE").collect()
        #expect(try await live.send(.GET, "/v1/session", bearer: session).status == 200)
        let appliedEarly = try await database.client.query(
            "SELECT count(*)::int8 FROM risc_event_actions WHERE event_id = ANY(\(ids)) AND NOT shadow"
        ).collect().first?.decode(Int64.self)
        #expect(appliedEarly == 0, "a shadow event was applied before its replay")
        let cliExplained = try await runRiscReceiver(["events", "explain", String(ids[0])], environment: cli)
        #expect(cliExplained.status == 0)
        #expect(cliExplained.output.contains("in enforce mode") && cliExplained.output.contains("delete_grants"), "\(cliExplained.output)")
        // Meanwhile, after the events arrived: a new session (it may be the attacker's), and a grant stored after the
        // tokens-revoked event was issued (not one of the revoked tokens).
        let laterSession = try await newSession(live)
        let laterGrant = try await storeGrant(live, token: "1//later-\(UUID().uuidString)")
        // Explain, now enforcing, says what the replay will do: every live session ends, the later grant stays.
        let liveSessions = try #require(try await user(live)["sessions"]?["active"]?.number)
        #expect(liveSessions >= 2)
        let beforeReplay = try await live.send(.GET, "/admin/v1/events/\(ids[0])/explain", bearer: Harness.adminToken).json
        let wouldDo = (beforeReplay["actions"]?.arrayValue ?? []).map { "\($0["kind"]?.stringValue ?? ""):\($0["rows_affected"]?.number ?? -1)" }
        #expect(wouldDo == ["revoke_sessions:\(liveSessions)", "delete_grants:1.0"], "\(beforeReplay)")

        // The operator replays what arrived in shadow mode.
        let since = ISO8601DateFormatter().string(from: start)
        let replayed = try await runRiscReceiver(["events", "replay", "--since", since, "--json"], environment: cli)
        #expect(replayed.status == 0, "\(replayed.output)")
        #expect(replayed.output.contains("\"replayed\":[\(ids.map(String.init).joined(separator: ","))]"), "\(replayed.output)")
        try await eventually("the replayed events are applied") {
            let status = try await live.send(.GET, "/v1/session", bearer: session).status
            let left = try await live.send(.GET, "/admin/v1/stats", bearer: Harness.adminToken).json["shadow_events"]
            return status == 401 && left == 0
        }
        // At least as strict as enforcing on time: the session made meanwhile ends too (a replay's cutoff is the replay).
        #expect(try await live.send(.GET, "/v1/session", bearer: laterSession).status == 401)
        // Ordering holds: the older account-enabled, applied after the hijacking, is stale; the account stays disabled.
        let refused = try await signIn(live)
        #expect(refused.status == 403 && refused.error == "account_disabled", "\(refused.body)")
        account = try await user(live)
        #expect(account["flags"]?.arrayValue?.contains("sign_in_disabled") == true, "\(account)")
        // The grant stored before the event was issued is erased; the one stored after it is kept.
        #expect(account["grants"]?["active"] == 1, "\(account)")
        #expect(account["grants"]?["revoked"] == 1, "\(account)")
        let laterGrantID = try #require(laterGrant.json["grant_id"].flatMap(\.stringValue).flatMap(UUID.init(uuidString:)))
        let laterGrantLive = try await database.client.query("SELECT revoked_at IS NULL FROM risc_grants WHERE id = \(laterGrantID)")
            .collect().first?.decode(Bool.self)
        #expect(laterGrantLive == true)
        let enabled = try await live.send(.GET, "/admin/v1/events/\(ids[2])", bearer: Harness.adminToken).json
        let enforced = (enabled["actions"]?.arrayValue ?? []).filter { $0["shadow"] == false }
        #expect(enforced.map { $0["rows_affected"]?.number } == [0], "\(enabled)")
        #expect(enforced.first?["detail"]?.stringValue?.contains("skipped") == true)
        values = try await metrics(live)
        #expect(values["risc_enforce"] == 1)
        // Now the subscriber hears of what changed.
        try await eventually("the subscriber is told") { subscriber.accepted.withLock { $0 }.contains { $0.sub == sub } }
        // But not of the skipped enable, which would re-enable the account in a store that mirrors it. A barrier: one
        // user's notifications arrive in order, so once a later event's has, the enable's would have come before it.
        var later = SETRequest(type: "sessions-revoked", sub: sub)
        later.jti = "shadow-later-\(UUID().uuidString)"
        #expect(
            try await live.send(.POST, "/risc/events", body: try await transmitter.makeSET(later), contentType: "application/secevent+jwt").status
                == 202)
        try await eventually("the later event's notification arrives") {
            subscriber.accepted.withLock { $0 }.contains { $0.json["event"]?["jti"]?.stringValue == later.jti }
        }
        let told = subscriber.accepted.withLock { $0 }.filter { $0.sub == sub }.compactMap { $0.json["type"]?.stringValue }
        #expect(!told.contains("enable_sign_in"), "\(told)")
        #expect(told.contains("disable_sign_in") && told.contains("delete_grants"), "\(told)")
    }
}
