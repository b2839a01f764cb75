import AsyncHTTPClient
import DevTransmitter
import Foundation
import NIOCore
import PostgresNIO
import RISC
import RISCStore
import RISCWorker
import Testing

/// The defects a hostile sender could reach, each pinned by a test that failed before its fix.
@Suite("Hardening: what a hostile sender could break", .timeLimit(.minutes(3)))
struct HardeningTests {
    static var options: Harness.Options {
        var options = Harness.Options()
        options.worker = true
        return options
    }

    func user() -> String { "hard-\(UUID().uuidString.prefix(8))" }

    /// A signed SET whose events the test writes itself; the subject's issuer is Google's sign-in unless told.
    func signedSET(
        _ harness: Harness, iat: Double? = nil, events: [String: JSONValue], audience: JSONValue = .string(Harness.audience)
    ) async throws -> String {
        try await harness.sign(
            harness.claims { claims in
                claims["events"] = .object(events)
                claims["aud"] = audience
                if let iat { claims["iat"] = .number(iat) }
            })
    }

    static func subject(_ sub: String, iss: String = "https://accounts.google.com") -> JSONValue {
        ["subject_type": "iss-sub", "iss": .string(iss), "sub": .string(sub)]
    }

    func postAndWait(_ harness: Harness, _ token: String) async throws {
        let reply = try await harness.post(token)
        #expect(reply.status == 202, "\(reply.body)")
        #expect(try await harness.waitUntilProcessed(jti: jti(of: token)) == "done")
    }

    func sessionCount(_ harness: Harness, sub: String) async throws -> Int {
        for try await count in try await harness.database.query("SELECT count(*)::int8 FROM risc_sessions WHERE sub = \(sub)")
            .decode(Int64.self)
        {
            return Int(count)
        }
        return 0
    }

    // MARK: 1. A revoked user cannot mint a new session with an old ID token.

    @Test(
        "An ID token issued before a revocation no longer signs in, after each revoking event",
        arguments: [
            "sessions-revoked", "tokens-revoked", "hijacking",
        ])
    func oldIDTokenAfterRevocation(kind: String) async throws {
        try await Harness.with(Self.options) { harness in
            let sub = user()
            // The hijacker's copy: issued now, valid for an hour.
            let stolen = try await harness.transmitter.makeIDToken(IDTokenRequest(sub: sub))
            let first = try await harness.call(.POST, "/tokensignin", form: ["idtoken": stolen])
            #expect(first.status == 200, "\(first.body)")
            if kind == "hijacking" {
                try await harness.sendAndWait("account-disabled", sub: sub) { $0.reason = "hijacking" }
            } else {
                try await harness.sendAndWait(kind, sub: sub)
            }
            let sessionsBefore = try await sessionCount(harness, sub: sub)
            let again = try await harness.call(.POST, "/tokensignin", form: ["idtoken": stolen])
            // A hijacked account is disabled too: that, the more specific answer, wins over the token's age.
            #expect(again.status == (kind == "hijacking" ? 403 : 401), "\(again.body)")
            #expect(again.error == (kind == "hijacking" ? "account_disabled" : "invalid_token"))
            #expect(try await sessionCount(harness, sub: sub) == sessionsBefore, "a refused sign-in created a session")
            if kind != "hijacking" {
                // The user's own later sign-in, with a token issued after the revocation, works.
                #expect(try await harness.signIn(sub: sub).status == 200)
            }
        }
    }

    // MARK: 2. One oversized or unstorable claim fails only its own SET.

    /// The advisory locks (classid, objid, objsubid) of this connection, or of every connection: objsubid 2 is the
    /// two-key form, classid its first key.
    static func advisoryLocks(_ connection: PostgresConnection, everyone: Bool) async throws -> [[Int64]] {
        var locks: [[Int64]] = []
        for try await (classID, objectID, form) in try await connection.query(
            """
            SELECT classid::int8, objid::int8, objsubid::int8 FROM pg_locks
             WHERE locktype = 'advisory' AND (\(everyone) OR pid = pg_backend_pid())
            """, logger: Harness.logger
        ).decode((Int64, Int64, Int64).self) {
            locks.append([classID, objectID, form])
        }
        return locks
    }

    @Test("Each advisory lock has its own key space: a user's lock can never be the delivery prober's, whatever the sub")
    func advisoryLockKeySpaces() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            try await harness.database.withTransaction(logger: Harness.logger) { connection in
                try await connection.query("SELECT risc_lock_user('someone')", logger: Harness.logger)
                var hash: Int64 = 0
                for try await value in try await connection.query("SELECT hashtext('someone')::int8", logger: Harness.logger).decode(Int64.self) {
                    hash = value < 0 ? value + (1 << 32) : value  // objid is the key's 32 bits, unsigned
                }
                #expect(try await Self.advisoryLocks(connection, everyone: false) == [[Int64(AdvisoryLock.userClass), hash, 2]])
            }
            try await withProber(harness, interval: .seconds(60), deliveryURL: harness.eventsURL) {
                try await eventually("the prober holds its lock") {
                    try await harness.database.withConnection { connection in
                        try await Self.advisoryLocks(connection, everyone: true).contains(
                            [Int64(AdvisoryLock.singletonClass), Int64(AdvisoryLock.deliveryProbe.rawValue), 2])
                    }
                }
            }
        }
    }

    @Test("An oversized jti, iss or sub is refused alone; SETs committed beside it are accepted")
    func oversizedClaims() async throws {
        try await Harness.with { harness in
            let huge = String(repeating: "x", count: 4000)
            let oversized = [
                try await harness.sign(harness.claims { $0["jti"] = .string(huge) }),
                try await harness.sign(harness.claims { $0["iss"] = .string(huge) }),
                try await signedSET(harness, events: [EventType.sessionsRevoked.rawValue: ["subject": Self.subject(huge)]]),
                try await harness.sign(
                    harness.claims { $0["sub_id"] = ["format": "iss_sub", "iss": "https://accounts.google.com", "sub": .string(huge)] }),
            ]
            let valid = try await (0..<12).asyncMap { _ in try await harness.makeSET("sessions-revoked") }
            let replies = try await withThrowingTaskGroup(of: (Bool, String, Harness.Reply).self) { group in
                for token in oversized { group.addTask { (false, token, try await harness.post(token)) } }
                for token in valid { group.addTask { (true, token, try await harness.post(token)) } }
                var replies: [(Bool, String, Harness.Reply)] = []
                for try await reply in group { replies.append(reply) }
                return replies
            }
            for (isValid, token, reply) in replies {
                if isValid {
                    #expect(reply.status == 202, "\(reply.body)")
                    #expect(try await harness.stored(jti: jti(of: token)).count == 1)
                } else {
                    #expect(reply.status == 400, "\(reply.body)")
                    #expect(reply.rejection?.err == "invalid_request")
                }
            }
            // Just over the bound is refused; exactly at it is accepted.
            let atBound = String(repeating: "j", count: ClaimBounds.maxIdentifierBytes)
            #expect(try await harness.post(try await harness.sign(harness.claims { $0["jti"] = .string(atBound) })).status == 202)
            let over = try await harness.post(try await harness.sign(harness.claims { $0["jti"] = .string(atBound + "j") }))
            #expect(over.rejection?.err == "invalid_request")
        }
    }

    @Test("A row PostgreSQL refuses for any SQLSTATE fails only its SET with 400; the batch beside it commits")
    func databaseRefusesOneRow() async throws {
        try await Harness.withIsolatedDatabase { harness in
            // A constraint stands in for any refusal the core cannot foresee (SQLSTATE 23514, not a class-22
            // data exception).
            try await harness.database.query(
                "ALTER TABLE risc_events ADD CONSTRAINT no_poison CHECK (jti NOT LIKE 'poison-%') NOT VALID")
            let poison = try await harness.sign(harness.claims { $0["jti"] = .string("poison-\(UUID().uuidString)") })
            let valid = try await (0..<20).asyncMap { _ in try await harness.makeSET("sessions-revoked") }
            let replies = try await withThrowingTaskGroup(of: (String, Harness.Reply).self) { group in
                group.addTask { (poison, try await harness.post(poison)) }
                for token in valid { group.addTask { (token, try await harness.post(token)) } }
                var replies: [(String, Harness.Reply)] = []
                for try await reply in group { replies.append(reply) }
                return replies
            }
            for (token, reply) in replies {
                if token == poison {
                    #expect(reply.status == 400, "\(reply.body)")
                    #expect(reply.rejection?.err == "invalid_request")
                } else {
                    #expect(reply.status == 202, "\(reply.body)")
                }
            }
        }
    }

    @Test("A sub too long for a NOTIFY payload does not fail the transaction that changes the user: it commits, and the session caches are told `*`")
    func longSubNotification() async throws {
        // A database of its own: every `*` on the channel is this test's.
        try await Harness.withIsolatedDatabase { harness in
            let sub = String(repeating: "n", count: 9000)
            let token = "long-sub-\(UUID().uuidString)"
            // What the session caches hear (`*` is "drop everything"), until both changes below have been announced.
            let heard = await harness.hearSessionChanges { $0.filter { $0 == "*" }.count == 2 }
            defer { heard.cancel() }

            try await harness.database.query("INSERT INTO risc_users (sub) VALUES (\(sub))")
            try await harness.database.query(
                "INSERT INTO risc_sessions (token_hash, sub, expires_at) VALUES (\(SessionStore.tokenHash(token)), \(sub), now() + interval '1 hour')"
            )
            let before = try await harness.checkSession(token)
            #expect(before.status == 200 && before.json["flags"] == [], "\(before.body)")
            // The session-cache trigger notifies on every update of a user: the update commits, and a cached check
            // is dropped.
            try await harness.database.query("UPDATE risc_users SET review_required = true WHERE sub = \(sub)")
            let flagged = try await harness.database.query("SELECT review_required FROM risc_users WHERE sub = \(sub)").collect()
            #expect(try flagged.first?.decode(Bool.self) == true)
            try await eventually("the session check shows the flag") { try await harness.checkSession(token).json["flags"] == ["review_required"] }
            // And on every update of a session: a revocation, applied as the worker applies one, commits and is recorded.
            let jti = "long-sub-\(UUID().uuidString)"
            let eventID = try #require(
                try await harness.database.query(
                    """
                    INSERT INTO risc_events (issuer, jti, event_types, subject_sub, events, claims, issued_at, status)
                    VALUES ('https://hardening.test', \(jti), '{}', NULL, '[]', '{}', now(), 'done') RETURNING id
                    """
                ).collect().first?.decode(Int64.self))
            let actions: JSONValue = [["event": .number(Double(eventID)), "position": .number(0), "kind": "revoke_sessions", "sub": .string(sub)]]
            _ = try await harness.database.query("SELECT count(*) FROM risc_apply_actions(\(actions.serialized)::jsonb)").collect()
            #expect(try await harness.actions(jti: jti) == [.init(kind: "revoke_sessions", rows: 1)])
            let revoked = try await harness.database.query(
                "SELECT revoked_by_event = \(eventID) FROM risc_sessions WHERE token_hash = \(SessionStore.tokenHash(token))"
            ).collect()
            #expect(try revoked.first?.decode(Bool?.self) == true)
            try await eventually("the session check sees the revocation") { try await harness.checkSession(token).error == "session_revoked" }
            // Each change was announced as `*`: never the sub itself, which PostgreSQL refuses in a payload.
            let payloads = try await withTimeout(.seconds(30)) { try await heard.value }
            #expect(payloads.filter { $0 == "*" }.count == 2, "\(payloads)")
            #expect(payloads.allSatisfy { $0 == "*" || $0.isEmpty }, "only `*` and the caches' heartbeats: \(payloads)")
        }
    }

    // MARK: 4. token-revoked matches only what it names.

    @Test("token-revoked: only the SET's clients, only refresh tokens, and a shared prefix is erased and flagged")
    func tokenRevokedScope() async throws {
        try await Harness.with(Self.options) { harness in
            let prefix = "1//0g" + String(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(11))
            #expect(prefix.utf8.count == 16)
            let ours = try await harness.storeGrant(sub: user(), refreshToken: prefix + "-ours")
            let foreign = try await harness.call(
                .POST, "/v1/grants", bearer: Harness.serviceToken,
                json: ["sub": .string(user()), "refresh_token": .string(prefix + "-theirs"), "client_id": "third-party-client"])
            let foreignID = try #require(foreign.json["grant_id"]?.stringValue)
            func revoked(_ tokenType: String, alg: String = "prefix", value: String = prefix) -> [String: JSONValue] {
                [
                    EventType.tokenRevoked.rawValue: [
                        "subject": [
                            "subject_type": "oauth_token", "token_type": .string(tokenType), "token_identifier_alg": .string(alg),
                            "token": .string(value),
                        ]
                    ]
                ]
            }
            // An access token's identifier never erases a refresh token.
            let accessToken = try await signedSET(harness, events: revoked("access_token"))
            try await postAndWait(harness, accessToken)
            #expect(try await harness.actions(jti: jti(of: accessToken)).map(\.kind) == ["skip"])
            #expect(try await !harness.ciphertextIsErased(grantID: ours))

            // Only the grant of the SET's audience is erased; another client's grant with the same prefix stays.
            let scoped = try await signedSET(harness, events: revoked("refresh_token"))
            try await postAndWait(harness, scoped)
            #expect(try await harness.ciphertextIsErased(grantID: ours))
            #expect(try await !harness.ciphertextIsErased(grantID: foreignID))
            #expect(try await harness.actions(jti: jti(of: scoped)) == [.init(kind: "delete_grant_by_prefix", rows: 1, detail: prefix)])

            // Two grants of our client sharing the prefix: both erased (fail safe), and the event is flagged.
            let shared = "1//0h" + String(UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(11))
            let a = try await harness.storeGrant(sub: user(), refreshToken: shared + "-a")
            let b = try await harness.storeGrant(sub: user(), refreshToken: shared + "-b")
            let ambiguous = try await signedSET(harness, events: revoked("refresh_token", value: shared))
            try await postAndWait(harness, ambiguous)
            #expect(try await harness.ciphertextIsErased(grantID: a))
            #expect(try await harness.ciphertextIsErased(grantID: b))
            let actions = try await harness.actions(jti: jti(of: ambiguous))
            #expect(actions.map(\.kind) == ["delete_grant_by_prefix", "ambiguous_token_identifier"])
            #expect(actions.last?.rows == 2)
        }
    }

    // MARK: 5. Staleness is per event and per user.

    @Test("A stale account-disabled never suppresses another event of its SET")
    func staleEventInMultiEventSET() async throws {
        try await Harness.with(Self.options) { harness in
            let sub = user()
            let session = try await harness.newSession(sub: sub)
            let now = Date().timeIntervalSince1970
            try await harness.sendAndWait("account-enabled", sub: sub) { $0.iat = now + 60 }
            // One SET: a stale account-disabled (bulk-account) and a sessions-revoked, for the same user.
            let token = try await signedSET(
                harness, iat: now,
                events: [
                    EventType.accountDisabled.rawValue: ["subject": Self.subject(sub), "reason": "bulk-account"],
                    EventType.sessionsRevoked.rawValue: ["subject": Self.subject(sub)],
                ])
            try await postAndWait(harness, token)
            #expect(try await harness.checkSession(session).error == "session_revoked")
            #expect(try await harness.signIn(sub: sub).status == 200, "the stale disable changed the account state")
        }
    }

    @Test("A stale hijacking report revokes the sessions created up to its iat, without changing the account state")
    func staleHijacking() async throws {
        try await Harness.with(Self.options) { harness in
            let sub = user()
            let early = try await harness.newSession(sub: sub)
            try await Task.sleep(for: .milliseconds(300))
            let reportedAt = Date().timeIntervalSince1970
            try await Task.sleep(for: .milliseconds(300))
            let late = try await harness.newSession(sub: sub)
            try await harness.sendAndWait("account-enabled", sub: sub) { $0.iat = reportedAt + 60 }
            let jti = try await harness.sendAndWait("account-disabled", sub: sub) {
                $0.reason = "hijacking"
                $0.iat = reportedAt
            }
            #expect(try await harness.checkSession(early).error == "session_revoked")
            #expect(try await harness.checkSession(late).status == 200)
            let actions = try await harness.actions(jti: jti)
            #expect(actions.map(\.kind) == ["disable_sign_in", "revoke_sessions"])
            #expect(actions.map(\.rows) == [0, 1])
            #expect(try await harness.signIn(sub: sub).status == 200, "the stale report disabled sign-in")
        }
    }

    // MARK: 6. One lock order: sign-in and the worker never deadlock.

    @Test("Sign-ins during a batch that revokes and then disables the same user never deadlock")
    func signInAndWorkerLockOrder() async throws {
        try await Harness.withIsolatedDatabase { harness in
            let sub = user()
            _ = try await harness.newSession(sub: sub)
            // Many grants make the batch's delete_grants slow: the window between the batch's revocation (the
            // user's advisory lock) and its disable (the user's row) is wide open for sign-ins, which
            // before the fix took the row first and then the advisory lock.
            try await harness.database.query(
                """
                INSERT INTO risc_grants (id, sub, client_id, token_prefix, token_hash, ciphertext, vault_key_id)
                SELECT gen_random_uuid(), \(sub), 'c', 'p-' || i, 'h-' || i, '\\x00'::bytea, 'k'
                FROM generate_series(1, 40000) AS i
                """)
            // One batch: tokens-revoked (revoke, delete grants), then account-disabled, for the same user.
            for type in ["tokens-revoked", "account-disabled"] {
                #expect(try await harness.post(try await harness.makeSET(type, sub: sub)).status == 202)
            }
            let deadlocksBefore = try await deadlocks(harness)
            let queue = EventQueue(client: harness.database, logger: Harness.logger)
            async let batch = queue.processBatch(limit: 10)
            let statuses = try await withThrowingTaskGroup(of: [Int].self) { group in
                for _ in 0..<4 {
                    group.addTask {
                        var statuses: [Int] = []
                        for _ in 0..<25 { statuses.append(try await harness.signIn(sub: sub).status) }
                        return statuses
                    }
                }
                return try await group.reduce(into: []) { $0 += $1 }
            }
            let result = try await batch
            #expect(result.done == 2 && result.failed == 0, "\(result)")
            #expect(statuses.allSatisfy { [200, 401, 403].contains($0) }, "\(statuses.filter { ![200, 401, 403].contains($0) })")
            #expect(try await deadlocks(harness) == deadlocksBefore, "PostgreSQL detected a deadlock")
        }
    }

    @Test("Two batches erasing grants by token identifier and by user take their locks in one order: no deadlock")
    func grantErasureLockOrder() async throws {
        try await Harness.withIsolatedDatabase(Self.options) { harness in
            let (x, y) = ("grants-x-\(UUID().uuidString)", "grants-y-\(UUID().uuidString)")
            // Many grants behind one identifier make the first batch's erasure slow: the second batch starts inside it.
            try await harness.database.query(
                """
                INSERT INTO risc_grants (id, sub, client_id, token_prefix, token_hash, ciphertext, vault_key_id)
                SELECT gen_random_uuid(), \(x), 'c', 'prefix-of-x', 'hx-' || i, '\\x00'::bytea, 'k'
                FROM generate_series(1, 40000) AS i
                UNION ALL SELECT gen_random_uuid(), \(y), 'c', 'prefix-of-y', 'hy', '\\x00'::bytea, 'k'
                """)
            let jti = try await harness.sendAndWait("sessions-revoked", sub: "grants-event-\(UUID().uuidString)")
            var eventID: Int64 = 0
            for try await id in try await harness.database.query("SELECT id FROM risc_events WHERE jti = \(jti)").decode(Int64.self) { eventID = id }
            func batch(prefix: String, user: String) -> String {
                JSONValue.array([
                    [
                        "event": .number(Double(eventID)), "position": 0, "kind": "delete_grant_by_prefix", "sub": .null,
                        "argument": .string(prefix), "client_ids": ["c"],
                    ],
                    [
                        "event": .number(Double(eventID)), "position": 0, "kind": "delete_grants", "sub": .string(user), "argument": .null,
                        "client_ids": [],
                    ],
                ]).serialized
            }
            let (first, second) = (batch(prefix: "prefix-of-x", user: y), batch(prefix: "prefix-of-y", user: x))
            let deadlocksBefore = try await deadlocks(harness)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (delay, actions) in [(0, first), (150, second)] {
                    group.addTask {
                        try await Task.sleep(for: .milliseconds(delay))
                        _ = try await harness.database.withTransaction(logger: Harness.logger) { connection in
                            try await connection.query("SELECT * FROM risc_apply_actions(\(actions)::jsonb, NULL, '{}')", logger: Harness.logger)
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await deadlocks(harness) == deadlocksBefore, "PostgreSQL detected a deadlock")
            for try await live in try await harness.database.query(
                "SELECT count(*)::int8 FROM risc_grants WHERE sub IN (\(x), \(y)) AND revoked_at IS NULL"
            ).decode(Int64.self) {
                #expect(live == 0)
            }
        }
    }

    func deadlocks(_ harness: Harness) async throws -> Int64 {
        // Statistics are per database; this one belongs to the test alone.
        try await harness.database.query("SELECT pg_stat_clear_snapshot()")
        for try await count in try await harness.database.query(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).decode(Int64.self) {
            return count
        }
        return -1
    }

    // MARK: 7, 12. Subjects that name no user of ours.

    @Test("An empty sub, a non-string sub, or a subject from another issuer changes no user, and the skip is recorded")
    func subjectsThatNameNoUser() async throws {
        try await Harness.with(Self.options) { harness in
            let victim = user()
            let session = try await harness.newSession(sub: victim)
            let cases: [(JSONValue, String)] = [
                (Self.subject(victim, iss: "https://evil.example"), "the subject was not issued by Google's sign-in"),
                (Self.subject(victim, iss: harness.transmitter.issuer), "the subject was not issued by Google's sign-in"),
                (Self.subject(""), "the subject's sub is empty"),
                (["subject_type": "iss-sub", "iss": "https://accounts.google.com", "sub": 42], "the subject names no Google account"),
            ]
            for (subject, reason) in cases {
                let token = try await signedSET(harness, events: [EventType.sessionsRevoked.rawValue: ["subject": subject]])
                try await postAndWait(harness, token)
                #expect(try await harness.actions(jti: jti(of: token)) == [.init(kind: "skip", rows: 0, detail: reason)])
            }
            #expect(try await harness.checkSession(session).status == 200)
            for try await count in try await harness.database.query("SELECT count(*)::int8 FROM risc_users WHERE sub = ''")
                .decode(Int64.self)
            {
                #expect(count == 0, "a user row with an empty sub was created")
            }
            // Google's own sample spells the issuer with a trailing slash: that names the user.
            let sample = try await signedSET(
                harness, events: [EventType.sessionsRevoked.rawValue: ["subject": Self.subject(victim, iss: "https://accounts.google.com/")]])
            try await postAndWait(harness, sample)
            #expect(try await harness.checkSession(session).error == "session_revoked")
        }
    }

    // MARK: 13. Prefixes in bytes, and ASCII-only vault tokens.

    @Test("The vault refuses a refresh token that is not printable ASCII")
    func vaultRefusesNonASCII() async throws {
        try await Harness.with { harness in
            for token in ["1//0g\u{00E9}t\u{0301}oken", "1//0g token", "1//0g\u{0000}x"] {
                let reply = try await harness.call(
                    .POST, "/v1/grants", bearer: Harness.serviceToken,
                    json: ["sub": .string(user()), "refresh_token": .string(token), "client_id": .string(Harness.audience)])
                #expect(reply.status == 400, "\(reply.body)")
                #expect(reply.error == "invalid_request")
            }
        }
    }

    // MARK: 14. The audit trail keeps the claims as received.

    @Test("The admin API shows the claims exactly as received: a 30-digit number and escapes are not rewritten")
    func claimsVerbatim() async throws {
        try await Harness.with { harness in
            let jti = UUID().uuidString
            let payload = """
                {"iss":"\(harness.transmitter.issuer)","aud":"\(Harness.audience)","iat":\(Int(Date().timeIntervalSince1970)),\
                "jti":"\(jti)","n":123456789012345678901234567890,"e":1E2,"s":"caf\\u00e9",\
                "events":{"https://example.com/unknown-type":{}}}
                """
            let reply = try await harness.post(try harness.transmitter.sign(payloadJSON: payload))
            #expect(reply.status == 202, "\(reply.body)")
            var id: Int64 = 0
            for try await value in try await harness.database.query("SELECT id FROM risc_events WHERE jti = \(jti)").decode(Int64.self) {
                id = value
            }
            let event = try await harness.call(.GET, "/admin/v1/events/\(id)", bearer: Harness.adminToken)
            #expect(event.status == 200)
            #expect(event.body.contains("\"claims\":" + payload), "\(event.body)")
        }
    }
}

extension Sequence {
    func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var results: [T] = []
        for element in self { results.append(try await transform(element)) }
        return results
    }
}

#if canImport(Glibc)
import Glibc
#endif

/// A raw TCP connection to loopback, for clients that misbehave on purpose (half a request, then silence).
struct RawConnection {
    let fd: Int32

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        let connected = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { throw SubprocessFailed(description: "cannot connect to 127.0.0.1:\(port)") }
    }

    func send(_ text: String) {
        _ = text.utf8CString.withUnsafeBufferPointer { Glibc.send(fd, $0.baseAddress, $0.count - 1, Int32(MSG_NOSIGNAL)) }
    }

    /// Waits (bounded) until the peer closes the connection; returns how long that took, or nil if it stayed open.
    func waitForClose(within limit: Duration) async -> Duration? {
        let started = ContinuousClock.now
        var buffer = [UInt8](repeating: 0, count: 4096)
        while ContinuousClock.now - started < limit {
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            if poll(&poller, 1, 0) > 0 {
                let count = recv(fd, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                if count == 0 || (count < 0 && errno != EAGAIN) { return ContinuousClock.now - started }
            }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return nil
    }

    func close() { _ = Glibc.close(fd) }
}

@Suite("Hardening: slow senders and bounded shutdown", .timeLimit(.minutes(3)))
struct SlowSenderTests {
    @Test("A client that stalls mid-request is disconnected after RISC_IDLE_TIMEOUT")
    func stalledRequests() async throws {
        try await ServeProcess.with(environment: ["RISC_IDLE_TIMEOUT": "2"]) { serve, _ in
            let port = try #require(URL(string: serve.url)?.port)
            // Half a request line, then silence; and headers promising a body that never comes.
            let headOnly = try RawConnection(port: port)
            headOnly.send("POST /risc/events HT")
            let bodyless = try RawConnection(port: port)
            bodyless.send("POST /risc/events HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{\"partial\":")
            defer {
                headOnly.close()
                bodyless.close()
            }
            let first = await headOnly.waitForClose(within: .seconds(10))
            let second = await bodyless.waitForClose(within: .seconds(10))
            #expect(first != nil && first! < .seconds(6), "a stalled request line kept its connection: \(String(describing: first))")
            #expect(second != nil && second! < .seconds(6), "a stalled body kept its connection: \(String(describing: second))")
            #expect(try await serve.get("/healthz").status == 200)
        }
    }

    @Test(
        "A log pipe that nobody reads stops nothing: requests are still answered; SIGTERM then ends the process within RISC_SHUTDOWN_TIMEOUT plus 5 s, exit 1"
    )
    func stalledLogPipe() async throws {
        // A log collector that stops reading (a container runtime's blocking log mode does this when it falls behind):
        // a thread that writes to it blocks in write(2).
        let pipe = FileManager.default.temporaryDirectory.appendingPathComponent("serve-log-\(UUID().uuidString)").path
        #expect(mkfifo(pipe, 0o600) == 0)
        let reader = open(pipe, O_RDONLY | O_NONBLOCK)  // holds the pipe open, and never reads
        #expect(reader >= 0)
        defer {
            close(reader)
            unlink(pipe)
        }
        try await IsolatedDatabase.with { database in
            let transmitter = try await DevTransmitter(settings: .init(port: 0, audience: Harness.audience), logger: Harness.logger)
            try await serving(transmitter) {
                let serve = try ServeProcess.start(
                    databaseURL: database.url, transmitter: transmitter, environment: ["RISC_SHUTDOWN_TIMEOUT": "1"],
                    launcher: ["/bin/sh", "-c", "exec \"$@\" > '\(pipe)' 2>&1", "sh"])
                defer { serve.stop() }
                try await serve.waitUntilReady()
                // Each rejected SET logs a line (about 200 bytes): far more than the pipe holds (64 KiB).
                var answered = 0
                for _ in 0..<1500 {
                    var request = HTTPClientRequest(url: serve.url + "/risc/events")
                    request.method = .POST
                    request.headers.add(name: "Connection", value: "close")
                    request.body = .bytes(ByteBuffer(string: "not a SET"))
                    guard let response = try? await HTTPClient.shared.execute(request, timeout: .seconds(5)), response.status == .badRequest
                    else { break }
                    answered += 1
                }
                #expect(answered == 1500, "a request went unanswered once the log pipe filled")
                var waiting: Int32 = 0
                #expect(ioctl(reader, UInt(FIONREAD), &waiting) == 0)
                let capacity = fcntl(reader, 1032)  // F_GETPIPE_SZ, which Glibc does not export to Swift
                #expect(capacity > 0 && waiting >= capacity - 4096, "the pipe is full: \(waiting) of \(capacity) bytes wait in it")
                // Still serving: health, and a SET is stored.
                #expect(try await serve.get("/healthz").status == 200)
                let set = try await transmitter.makeSET(SETRequest(type: "sessions-revoked", sub: "logless-\(UUID().uuidString)"))
                var post = HTTPClientRequest(url: serve.url + "/risc/events")
                post.method = .POST
                post.body = .bytes(ByteBuffer(string: set))
                #expect(try await HTTPClient.shared.execute(post, timeout: .seconds(10)).status == .accepted)

                // The last lines can never be written: the process ends all the same, and says it did not finish.
                let (status, took) = try await serve.terminate()
                #expect(status == 1, "exit status \(status) after \(took)")
                #expect(took < .seconds(15), "SIGTERM took \(took)")
            }
        }
    }

    @Test("Stalled requests cannot hold SIGTERM open: the process ends within RISC_SHUTDOWN_TIMEOUT, exit 0")
    func boundedShutdown() async throws {
        // The idle timeout is long here, so only the shutdown bound can end the stalled connections.
        try await ServeProcess.with(environment: ["RISC_IDLE_TIMEOUT": "120", "RISC_SHUTDOWN_TIMEOUT": "2"]) { serve, _ in
            let port = try #require(URL(string: serve.url)?.port)
            let holders = try (0..<3).map { _ in try RawConnection(port: port) }
            for holder in holders {
                holder.send("POST /risc/events HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{")
            }
            defer { for holder in holders { holder.close() } }
            #expect(try await serve.get("/healthz").status == 200)
            try await Task.sleep(for: .milliseconds(200))
            let (status, took) = try await serve.terminate()
            #expect(status == 0, "\(serve.log.suffix(2000))")
            #expect(took < .seconds(10), "SIGTERM took \(took)")
        }
    }
}
