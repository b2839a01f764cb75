import DevTransmitter
import Foundation
import PostgresNIO
import RISC
import RISCStore
import Testing

@Suite("Sign-in, sessions and the refresh-token vault over real HTTP and PostgreSQL")
struct SignInAndVaultTests {
    @Test("A verified ID token signs in (form or JSON), creates the user, and a hashed session")
    func signIn() async throws {
        try await Harness.with { harness in
            let sub = "signin-\(UUID().uuidString)"
            let reply = try await harness.signIn(sub: sub, json: true)
            #expect(reply.status == 200)
            let token = try #require(reply.json["session_token"]?.stringValue)
            #expect(token.count >= 43)  // 256 bits in base64url
            #expect(reply.json["expires_at"]?.stringValue != nil)
            #expect(reply.json["user"]?.objectValue?["email"]?.stringValue == "\(sub)@example.com")

            let check = try await harness.checkSession(token)
            #expect(check.status == 200)
            #expect(check.json["user"]?.objectValue?["sub"]?.stringValue == sub)
            #expect(check.json["session"]?.objectValue?["created_at"] != nil)
            #expect(check.json["flags"] == [])

            // Only the hash is stored.
            var stored: [Data] = []
            for try await hash in try await harness.database.query("SELECT token_hash FROM risc_sessions WHERE sub = \(sub)").decode(Data.self) {
                stored.append(hash)
            }
            #expect(stored.count == 1)
            #expect(stored.first != Data(token.utf8))
            #expect(String(decoding: stored[0], as: UTF8.self).contains(token) == false)

            #expect(try await harness.call(.DELETE, "/v1/session", bearer: token).status == 204)
            #expect(try await harness.checkSession(token).error == "invalid_session")
            #expect(try await harness.checkSession("not-a-session").error == "invalid_session")
            #expect(try await harness.call(.GET, "/v1/session").error == "invalid_session")
        }
    }

    @Test("Expired, wrong aud, wrong iss, bad signature and unknown kid are all 401 invalid_token")
    func idTokenRejections() async throws {
        try await Harness.with { harness in
            let sub = "reject-\(UUID().uuidString)"
            var tokens: [String: String] = [:]
            tokens["expired"] = try await harness.idToken(sub: sub) { $0.expIn = -120 }
            tokens["wrong aud"] = try await harness.idToken(sub: sub) { $0.aud = "someone-else.apps.googleusercontent.com" }
            tokens["wrong iss"] = try await harness.idToken(sub: sub) { $0.iss = "https://evil.example" }
            tokens["unknown kid"] = try await harness.idToken(sub: sub) { $0.kid = "no-such-kid" }
            let good = try await harness.idToken(sub: sub)
            let parts = good.split(separator: ".")
            let otherSignature = try await harness.idToken(sub: "someone-else").split(separator: ".")[2]
            tokens["bad signature"] = "\(parts[0]).\(parts[1]).\(otherSignature)"
            tokens["not a JWT"] = "garbage"
            for (name, token) in tokens {
                let reply = try await harness.call(.POST, "/tokensignin", form: ["idtoken": token])
                #expect(reply.status == 401, "\(name): \(reply.body)")
                #expect(reply.error == "invalid_token", "\(name)")
            }
            // Within the 60 s leeway, and the scheme-less issuer spelling Google also uses, are accepted.
            let leeway = try await harness.idToken(sub: sub) { $0.expIn = -30 }
            #expect(try await harness.call(.POST, "/tokensignin", form: ["idtoken": leeway]).status == 200)
            let schemeless = try await harness.idToken(sub: sub) { $0.iss = String(harness.transmitter.openIDIssuer.dropFirst("http://".count)) }
            #expect(try await harness.call(.POST, "/tokensignin", form: ["idtoken": schemeless]).status == 200)
            // Nothing was created for the refused tokens' user beyond the accepted sign-ins.
            var sessions = 0
            for try await count in try await harness.database.query("SELECT count(*) FROM risc_sessions WHERE sub = \(sub)").decode(Int.self) {
                sessions = count
            }
            #expect(sessions == 2)
        }
    }

    @Test("One ID token replayed signs in again, but a user keeps at most RISC_MAX_SESSIONS_PER_USER live sessions: the oldest end")
    func sessionCap() async throws {
        var options = Harness.Options()
        options.maxSessionsPerUser = 3
        try await Harness.with(options) { harness in
            let sub = "capped-\(UUID().uuidString)"
            let idToken = try await harness.idToken(sub: sub)
            var sessions: [String] = []
            for _ in 0..<5 {
                let reply = try await harness.call(.POST, "/tokensignin", form: ["idtoken": idToken])
                #expect(reply.status == 200, "\(reply.body)")
                sessions.append(try #require(reply.json["session_token"]?.stringValue))
                if sessions.count == 1 { #expect(try await harness.checkSession(sessions[0]).status == 200) }  // now cached
            }
            // The cache hears of the ended session through the database's notification, a moment after the commit.
            try await eventually("the first session has ended") { try await harness.checkSession(sessions[0]).status == 401 }
            for (index, session) in sessions.enumerated() {
                let check = try await harness.checkSession(session)
                if index < 2 {
                    #expect(check.status == 401 && check.json["error"]?.stringValue == "invalid_session", "session \(index)")
                } else {
                    #expect(check.status == 200, "session \(index)")
                }
            }
            for try await count in try await harness.database.query("SELECT count(*)::int8 FROM risc_sessions WHERE sub = \(sub)")
                .decode(Int64.self)
            {
                #expect(count == 3)
            }
        }
    }

    @Test("The vault needs the service token, compared exactly")
    func vaultAuthentication() async throws {
        try await Harness.with { harness in
            let body: JSONValue = ["sub": "s", "refresh_token": "1//x", "client_id": .string(Harness.audience)]
            var sameLength = Array(Harness.serviceToken.utf8)
            sameLength[sameLength.count - 1] ^= 1
            for bearer in [nil, "wrong", String(decoding: sameLength, as: UTF8.self)] {
                let reply = try await harness.call(.POST, "/v1/grants", bearer: bearer, json: body)
                #expect(reply.status == 401, "\(bearer ?? "none")")
            }
            let missing = try await harness.call(.POST, "/v1/grants", bearer: Harness.serviceToken, json: ["sub": "s"])
            #expect(missing.status == 400)
            #expect(missing.error == "invalid_request")
        }
    }

    @Test("The vault refuses a body over 64 KiB, one that is not JSON, and a missing key, each saying which")
    func vaultBodies() async throws {
        try await Harness.with { harness in
            let client = Client(base: harness.receiverURL)
            let big = try await client.send(
                .POST, "/v1/grants", bearer: Harness.serviceToken, body: String(repeating: " ", count: 64 * 1024 + 1),
                contentType: "application/json")
            #expect(big.status == 413)
            #expect(big.json == ["error": "invalid_request", "description": "the body is too large"], "\(big.body)")
            let notJSON = try await client.send(.POST, "/v1/grants", bearer: Harness.serviceToken, body: "sub=s", contentType: "application/json")
            #expect(notJSON.status == 400)
            #expect(notJSON.json == ["error": "invalid_request", "description": "the body is not the expected JSON object"], "\(notJSON.body)")
            let missing = try await client.send(
                .POST, "/v1/grants/exchange", bearer: Harness.serviceToken, json: ["code": "c", "client_id": "x"])
            #expect(missing.status == 400)
            #expect(missing.json == ["error": "invalid_request", "description": "redirect_uri is required"], "\(missing.body)")
        }
    }

    @Test("Refresh tokens are encrypted at rest, refreshed at the token endpoint, and revoked there on delete")
    func vaultLifecycle() async throws {
        try await Harness.with { harness in
            let sub = "vault-\(UUID().uuidString)"
            let (grant, refreshToken) = try await harness.exchangeGrant(sub: sub)
            let id = try #require(UUID(uuidString: grant))

            // The row holds neither the token nor anything that contains it.
            for try await (ciphertext, prefix, hash) in try await harness.database.query(
                "SELECT ciphertext, token_prefix, token_hash FROM risc_grants WHERE id = \(id)"
            ).decode((Data, String, String).self) {
                #expect(ciphertext != Data(refreshToken.utf8))
                #expect(String(decoding: ciphertext, as: UTF8.self).contains(refreshToken) == false)
                #expect(prefix == TokenIdentifier.prefix(of: refreshToken))
                #expect(hash == TokenIdentifier.doubleSHA512Base64(of: refreshToken))
            }

            let refreshed = try await harness.grantToken(grant)
            #expect(refreshed.status == 200)
            #expect(refreshed.json["access_token"]?.stringValue?.hasPrefix("ya29.") == true)

            #expect(try await harness.call(.DELETE, "/v1/grants/\(grant)", bearer: Harness.serviceToken).status == 204)
            let status = try await harness.call(.POST, harness.transmitter.baseURL + "/dev/refresh-token-status", form: ["token": refreshToken])
            #expect(status.json["revoked"] == true)
            #expect(try await harness.grantToken(grant).status == 404)
            #expect(try await harness.call(.DELETE, "/v1/grants/\(grant)", bearer: Harness.serviceToken).status == 404)
        }
    }

    @Test("A code exchange with the wrong PKCE verifier is refused and stores nothing")
    func pkce() async throws {
        try await Harness.with { harness in
            let sub = "pkce-\(UUID().uuidString)"
            let code = try await harness.authorize(sub: sub, verifier: "the-right-verifier-0123456789-0123456789")
            let reply = try await harness.call(
                .POST, "/v1/grants/exchange", bearer: Harness.serviceToken,
                json: [
                    "code": .string(code), "code_verifier": "a-wrong-verifier-0123456789-0123456789",
                    "redirect_uri": "http://127.0.0.1/callback", "client_id": .string(Harness.audience),
                ])
            #expect(reply.status == 400)
            #expect(reply.error == "invalid_grant")
            var grants = 0
            for try await count in try await harness.database.query("SELECT count(*) FROM risc_grants WHERE sub = \(sub)").decode(Int.self) {
                grants = count
            }
            #expect(grants == 0)
        }
    }
}

@Suite("Session checks served from memory stay exact")
struct SessionCacheTests {
    /// How long an invalidation may take to travel by NOTIFY in these tests: far under the cache's 60 s safety net, so
    /// only the NOTIFY can bring it in time, and long enough for a starved machine.
    static let invalidationBound: Duration = .seconds(10)

    /// Polls (bounded) until the session check gives `expected`; the invalidation travels by NOTIFY.
    func expectSoon(_ harness: Harness, _ token: String, _ expected: String?, status: Int) async throws {
        let deadline = ContinuousClock.now + Self.invalidationBound
        var reply = try await harness.checkSession(token)
        while reply.status != status || reply.error != expected, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
            reply = try await harness.checkSession(token)
        }
        #expect(reply.status == status, "\(reply.body)")
        #expect(reply.error == expected)
    }

    /// Polls (bounded) until the session check shows `expected` flags; the invalidation travels by NOTIFY.
    func expectFlagsSoon(_ harness: Harness, _ token: String, _ expected: JSONValue) async throws {
        let deadline = ContinuousClock.now + Self.invalidationBound
        var flags = try await harness.checkSession(token).json["flags"]
        while flags != expected, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
            flags = try await harness.checkSession(token).json["flags"]
        }
        #expect(flags == expected)
    }

    @Test(
        "A statement that changes many users tells the caches in a few notifications that name them all; a payload the cache cannot read drops everything"
    )
    func batchedInvalidation() async throws {
        // A database of its own: every notification on the channel is this test's.
        try await Harness.withIsolatedDatabase { harness in
            let users = 300
            let prefix = "bulk-\(UUID().uuidString.prefix(8))-"
            // The users, and one more (`silent`) that the statement below does not change.
            let silent = "silent-\(prefix)"
            try await harness.database.query(
                "INSERT INTO risc_users (sub) SELECT \(prefix) || k FROM generate_series(1, \(users)) AS k UNION ALL SELECT \(silent)")
            try await harness.database.query(
                """
                INSERT INTO risc_sessions (token_hash, sub, expires_at)
                SELECT sha256((sub || '-token')::bytea), sub, now() + interval '1 hour' FROM risc_users
                """)
            let cached = [1, 150, users].map { "\(prefix)\($0)-token" }
            for token in cached + ["\(silent)-token"] {
                // Twice: the second answer comes from the cache.
                #expect(try await harness.checkSession(token).status == 200)
                #expect(try await harness.checkSession(token).status == 200)
            }
            // What the caches hear, until every user has been named.
            @Sendable func named(_ payloads: [String]) -> Set<String> {
                Set(payloads.flatMap { (try? JSONValue.parse($0.utf8))?.arrayValue?.compactMap(\.stringValue) ?? [] })
            }
            let heard = await harness.hearSessionChanges { named($0).count >= users }
            defer { heard.cancel() }

            try await harness.database.query("UPDATE risc_sessions SET revoked_at = now() WHERE starts_with(sub, \(prefix))")
            let payloads = try await withTimeout(Self.invalidationBound) { try await heard.value }
            #expect(named(payloads) == Set((1...users).map { "\(prefix)\($0)" }))
            // About 6,300 bytes of subs: two payloads, each under PostgreSQL's 8,000-byte limit.
            #expect((1...3).contains(payloads.count), "\(payloads.count) notifications for \(users) users")
            #expect(payloads.allSatisfy { $0.utf8.count < 8000 })
            for token in cached { try await expectSoon(harness, token, "session_revoked", status: 401) }

            // A change the caches are not told of, then a payload they cannot read: they drop everything.
            let token = "\(silent)-token"
            try await harness.database.query("ALTER TABLE risc_users DISABLE TRIGGER risc_users_updated")
            try await harness.database.query("UPDATE risc_users SET review_required = true WHERE sub = \(silent)")
            #expect(try await harness.checkSession(token).json["flags"] == [], "answered from the cache, which was not told")
            try await harness.database.query("SELECT pg_notify(\(SessionCache.channel), '[\"someone-else\", 1]')")
            try await expectFlagsSoon(harness, token, ["review_required"])
        }
    }

    @Test("A cache whose database announces changes on another channel (triggers of another build) answers nothing from memory")
    func triggersOfAnotherBuild() async throws {
        // A database of its own: its triggers are replaced below.
        try await Harness.withIsolatedDatabase { harness in
            let sub = "other-build-\(UUID().uuidString)"
            let token = try await harness.newSession(sub: sub)
            // The routine as an older build's `migrate` would put it back: one sub a payload, on the old channel.
            try await harness.database.query(
                """
                CREATE OR REPLACE FUNCTION risc_user_changed() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    PERFORM pg_notify('risc_sessions', sub) FROM (SELECT DISTINCT sub FROM changed) AS c;
                    RETURN NULL;
                END
                $$
                """)
            // Each round changes the user's flag, which this cache is not told of, then checks: once the cache has seen
            // the triggers (within a heartbeat), every check reads the database. Before that, a cached answer is stale.
            var review = false
            var consistent = 0
            let deadline = ContinuousClock.now + Self.invalidationBound
            while consistent < 5, ContinuousClock.now < deadline {
                review.toggle()
                try await harness.database.query("UPDATE risc_users SET review_required = \(review) WHERE sub = \(sub)")
                let flags = try await harness.checkSession(token).json["flags"]
                consistent = flags == (review ? ["review_required"] : []) ? consistent + 1 : 0
                try await Task.sleep(for: .milliseconds(100))
            }
            #expect(consistent == 5, "the session check kept answering from a cache that is not told of changes")
        }
    }

    @Test("A change made elsewhere (another process, an operator's SQL) reaches a cached session at once")
    func invalidation() async throws {
        try await Harness.with { harness in
            let sub = "cache-\(UUID().uuidString)"
            let revoked = try await harness.newSession(sub: sub)
            let deleted = try await harness.newSession(sub: sub)
            for token in [revoked, deleted] {
                // Twice: the second answer comes from the cache.
                #expect(try await harness.checkSession(token).status == 200)
                #expect(try await harness.checkSession(token).status == 200)
            }
            try await harness.database.query(
                "UPDATE risc_sessions SET revoked_at = now() WHERE token_hash = \(SessionStore.tokenHash(revoked))")
            try await expectSoon(harness, revoked, "session_revoked", status: 401)

            try await harness.database.query(
                "UPDATE risc_users SET credential_change_required = true WHERE sub = \(sub)")
            try await expectFlagsSoon(harness, deleted, ["credential_change_required"])

            try await harness.database.query("DELETE FROM risc_sessions WHERE token_hash = \(SessionStore.tokenHash(deleted))")
            try await expectSoon(harness, deleted, "invalid_session", status: 401)
        }
    }
}
