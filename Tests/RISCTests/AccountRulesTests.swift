import Foundation
import RISC
import Testing

@Suite("Event rules: what each event does, decided without I/O")
struct AccountRulesTests {
    let subject = Subject.issuerAndSubject(iss: "https://accounts.google.com/", sub: "42")

    func event(_ type: EventType, subject: Subject? = nil, reason: String? = nil, state: String? = nil) -> SecurityEvent {
        SecurityEvent(typeURI: type.rawValue, type: type, subject: subject ?? self.subject, reason: reason, state: state)
    }

    @Test("Every event type maps to its actions")
    func everyType() {
        let identifier = TokenIdentifier.prefix("1//0gabcdefghijk")
        let expected: [(SecurityEvent, [AccountAction])] = [
            (event(.sessionsRevoked), [.revokeSessions(user: .sub("42"))]),
            (event(.caepSessionRevoked), [.revokeSessions(user: .sub("42"))]),
            (event(.tokensRevoked), [.revokeSessions(user: .sub("42")), .deleteGrants(user: .sub("42"))]),
            (
                event(.tokenRevoked, subject: .oauthToken(tokenType: "refresh_token", identifier: identifier)),
                [.deleteGrant(identifier, clientIDs: ["app"])]
            ),
            (event(.accountDisabled), [.disableSignIn(user: .sub("42"), reason: nil)]),
            (
                event(.accountDisabled, reason: "hijacking"),
                [.disableSignIn(user: .sub("42"), reason: "hijacking"), .revokeSessions(user: .sub("42"))]
            ),
            (
                event(.accountDisabled, reason: "bulk-account"),
                [.disableSignIn(user: .sub("42"), reason: "bulk-account"), .flagForReview(user: .sub("42"))]
            ),
            (event(.accountEnabled), [.enableSignIn(user: .sub("42"))]),
            (event(.accountCredentialChangeRequired), [.requireCredentialChange(user: .sub("42"))]),
            (event(.caepCredentialChange), [.requireCredentialChange(user: .sub("42"))]),
            (event(.verification, state: "s-1"), [.recordVerification(state: "s-1")]),
            (event(.ssfVerification, state: "s-2"), [.recordVerification(state: "s-2")]),
            (event(.ssfStreamUpdated), [.skip(reason: "a stream status change names no user")]),
        ]
        for (event, actions) in expected {
            #expect(AccountAction.actions(for: event, audience: ["app"]) == actions, "\(event.shortName)")
        }
        #expect(Set(expected.compactMap(\.0.type)) == Set(EventType.allCases))
    }

    @Test("The id_token_claims subject works like iss-sub")
    func idTokenClaimsSubject() {
        let event = event(.sessionsRevoked, subject: .idTokenClaims(iss: "accounts.google.com", sub: "7", email: "a@example.com"))
        #expect(AccountAction.actions(for: event, audience: []) == [.revokeSessions(user: .sub("7"))])
    }

    @Test("A subject that names no Google account, or the wrong kind, is skipped with a reason")
    func skipped() {
        #expect(AccountAction.actions(for: event(.sessionsRevoked, subject: .email("a@example.com")), audience: []).map(\.kind) == [.skip])
        #expect(AccountAction.actions(for: event(.tokenRevoked), audience: []).map(\.kind) == [.skip])
        let unknown = SecurityEvent(typeURI: "https://example.com/new", type: nil, subject: subject)
        #expect(AccountAction.actions(for: unknown, audience: []).map(\.kind) == [.skip])
    }

    @Test("On a Shared Signals stream every event is acted on: a Google sub, an email to match, or nobody")
    func sharedSignalsSubjects() {
        func actions(_ type: EventType, _ subject: Subject?) -> [AccountAction] {
            var event = event(type, subject: subject)
            event.subject = subject
            event.subjectRules = .sharedSignals
            return AccountAction.actions(for: event, audience: [])
        }
        #expect(actions(.caepSessionRevoked, .issuerAndSubject(iss: "https://accounts.google.com", sub: "9")) == [.revokeSessions(user: .sub("9"))])
        #expect(actions(.caepSessionRevoked, .email("Ann@Example.com")) == [.revokeSessions(user: .email("Ann@Example.com"))])
        #expect(
            actions(.caepCredentialChange, .complex(members: ["user": .email("a@b.example"), "device": .opaque("d")]))
                == [.requireCredentialChange(user: .email("a@b.example"))])
        // Another issuer's sub, an opaque id, or no subject at all name nobody here, and the action is still taken.
        #expect(actions(.caepSessionRevoked, .issuerAndSubject(iss: "https://idp.example", sub: "9")) == [.revokeSessions(user: .nobody)])
        #expect(actions(.accountDisabled, .opaque("x")) == [.disableSignIn(user: .nobody, reason: nil)])
        #expect(actions(.tokensRevoked, nil) == [.revokeSessions(user: .nobody), .deleteGrants(user: .nobody)])
        // Google's own stream keeps its rule: an email alone names no one, and the event is a recorded skip.
        #expect(AccountAction.actions(for: event(.caepSessionRevoked, subject: .email("a@b.example")), audience: []).map(\.kind) == [.skip])
    }

    @Test("An email is resolved to the user it names, or to nobody; other actions are left as they are")
    func resolvingEmails() {
        let users = ["a@b.example": "7"]
        #expect(AccountAction.revokeSessions(user: .email("a@b.example")).resolvingEmail(users) == .revokeSessions(user: .sub("7")))
        #expect(
            AccountAction.disableSignIn(user: .email("c@b.example"), reason: "hijacking").resolvingEmail(users)
                == .disableSignIn(user: .nobody, reason: "hijacking"))
        #expect(AccountAction.enableSignIn(user: .sub("1")).resolvingEmail(users) == .enableSignIn(user: .sub("1")))
        #expect(AccountAction.recordVerification(state: "s").resolvingEmail(users) == .recordVerification(state: "s"))
    }

    @Test("The subject rules survive the stored form; an unknown rule is not read as Google's")
    func storedSubjectRules() throws {
        var event = event(.caepSessionRevoked, subject: .email("a@b.example"))
        event.subjectRules = .sharedSignals
        #expect(SecurityEvent(stored: event.jsonValue) == event)
        #expect(SecurityEvent(stored: self.event(.sessionsRevoked).jsonValue)?.subjectRules == .google)
        var stored = try #require(event.jsonValue.objectValue)
        stored["subject_rules"] = "from-the-future"
        #expect(SecurityEvent(stored: .object(stored)) == nil)
    }

    @Test("Only a non-empty sub issued by Google's sign-in names a user")
    func subjectIssuer() {
        for iss in ["https://accounts.google.com", "https://accounts.google.com/", "accounts.google.com"] {
            #expect(
                AccountAction.actions(for: event(.sessionsRevoked, subject: .issuerAndSubject(iss: iss, sub: "9")), audience: [])
                    == [.revokeSessions(user: .sub("9"))])
        }
        let skips: [(Subject, String)] = [
            (.issuerAndSubject(iss: "https://evil.example", sub: "9"), "the subject was not issued by Google's sign-in"),
            (.idTokenClaims(iss: "https://accounts.google.com.evil.example", sub: "9", email: nil), "the subject was not issued by Google's sign-in"),
            (.issuerAndSubject(iss: "https://accounts.google.com", sub: ""), "the subject's sub is empty"),
        ]
        for (subject, reason) in skips {
            #expect(
                AccountAction.actions(for: event(.accountDisabled, subject: subject, reason: "hijacking"), audience: []) == [.skip(reason: reason)])
        }
    }

    @Test("token-revoked acts on refresh tokens only, within the SET's audiences")
    func tokenRevokedScope() {
        let identifier = TokenIdentifier.prefix("1//0gabcdefghijk")
        for tokenType: String? in ["access_token", nil, "Refresh_Token"] {
            #expect(
                AccountAction.actions(for: event(.tokenRevoked, subject: .oauthToken(tokenType: tokenType, identifier: identifier)), audience: ["a"])
                    .map(\.kind) == [.skip])
        }
        let actions = AccountAction.actions(
            for: event(.tokenRevoked, subject: .oauthToken(tokenType: "refresh_token", identifier: identifier)), audience: ["a", "b"])
        #expect(actions.map(\.clientIDs) == [["a", "b"]])
    }

    @Test("Each action knows the position of its event in the SET")
    func positions() {
        let events = [event(.accountDisabled, reason: "hijacking"), event(.sessionsRevoked)]
        #expect(AccountAction.actions(for: events, audience: []).map(\.position) == [0, 0, 1])
    }

    @Test("Hash identifiers are stored and matched in one canonical spelling")
    func canonicalHash() throws {
        let token = "1//0g-some-refresh-token"
        let canonical = TokenIdentifier.doubleSHA512Base64(of: token)
        let urlSafeUnpadded = canonical.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        let identifier = try #require(TokenIdentifier(algorithm: "hash_base64_sha512_sha512", value: urlSafeUnpadded))
        #expect(AccountAction.deleteGrant(identifier, clientIDs: []).argument == canonical)
        #expect(AccountAction.deleteGrant(identifier, clientIDs: []).kind == .deleteGrantByHash)
    }

    @Test("What applied actions changed: rows for sessions and grants, actions for ambiguous identifiers and notified kinds")
    func actionTotals() {
        let totals = ActionTotals(
            kinds: [
                "revoke_sessions", "delete_grants", "delete_grant_by_prefix", "delete_grant_by_hash", "ambiguous_token_identifier",
                "disable_sign_in", "a_kind_from_a_newer_build",
            ],
            actions: [2, 1, 3, 1, 2, 1, 9], rows: [5, 4, 3, 1, 7, 1, 9])
        #expect(totals.sessionsRevoked == 5 && totals.grantsDeleted == 8 && totals.ambiguousTokenIdentifiers == 2)
        // The ambiguity note and an unknown kind are not notified: 2 + 1 + 3 + 1 + 1.
        #expect(totals.notifiedActions == 8)
        #expect(ActionTotals(kinds: ["record_verification", "skip"], actions: [1, 1], rows: [0, 0]).notifiedActions == 0)
        var sum = totals
        sum.add(ActionTotals(kinds: ["revoke_sessions"], actions: [1], rows: [1]))
        #expect(sum.sessionsRevoked == 6 && sum.grantsDeleted == 8 && sum.notifiedActions == 9)
        #expect(ActionTotals(kinds: [], actions: [], rows: []) == ActionTotals())
    }

    @Test("Retries back off exponentially with jitter, capped, then dead-letter")
    func retryPolicy() {
        let policy = RetryPolicy(maxAttempts: 4, baseDelay: 2, maxDelay: 10)
        #expect(policy.decision(afterFailedAttempts: 1, jitter: 1) == .retry(afterSeconds: 2))
        #expect(policy.decision(afterFailedAttempts: 1, jitter: 0) == .retry(afterSeconds: 1))
        #expect(policy.decision(afterFailedAttempts: 2, jitter: 1) == .retry(afterSeconds: 4))
        #expect(policy.decision(afterFailedAttempts: 3, jitter: 1) == .retry(afterSeconds: 8))
        #expect(RetryPolicy(maxAttempts: 20, baseDelay: 2, maxDelay: 10).decision(afterFailedAttempts: 9, jitter: 1) == .retry(afterSeconds: 10))
        #expect(policy.decision(afterFailedAttempts: 4, jitter: 0.5) == .dead)
    }

    @Test("Secrets compare equal only when identical")
    func secretComparison() {
        #expect(SecretComparison.equal("a-long-service-token", "a-long-service-token"))
        #expect(!SecretComparison.equal("a-long-service-tokem", "a-long-service-token"))
        #expect(!SecretComparison.equal("", "a-long-service-token"))
        #expect(!SecretComparison.equal("a-long-service-token-and-more", "a-long-service-token"))
    }
}

@Suite("Google ID token claims")
struct GoogleIDTokenTests {
    let now = Date(timeIntervalSince1970: 1_700_000_000)
    let policy = IDTokenPolicy(audiences: ["client-1"])

    func token(header: JSONValue = ["alg": "RS256", "kid": "k1", "typ": "JWT"], _ change: (inout [String: JSONValue]) -> Void = { _ in }) -> String {
        var claims: [String: JSONValue] = [
            "iss": "https://accounts.google.com", "aud": "client-1", "sub": "1234", "email": "a@example.com",
            "email_verified": "true", "iat": .number(now.timeIntervalSince1970 - 10), "exp": .number(now.timeIntervalSince1970 + 3590),
        ]
        change(&claims)
        return TestTokens.compact(header: header, claims: .object(claims))
    }

    @Test("A good token yields the profile; both issuer spellings are accepted")
    func good() throws {
        let parsed = try GoogleIDToken.parse(token(), policy: policy, now: now)
        #expect(parsed.profile.sub == "1234")
        #expect(parsed.profile.emailVerified == true)
        try parsed.checkIssuer(discoveryIssuer: "https://accounts.google.com")
        let schemeless = try GoogleIDToken.parse(token { $0["iss"] = "accounts.google.com" }, policy: policy, now: now)
        try schemeless.checkIssuer(discoveryIssuer: "https://accounts.google.com")
        let evil = try GoogleIDToken.parse(token { $0["iss"] = "https://accounts.google.com.evil" }, policy: policy, now: now)
        #expect(throws: GoogleIDToken.Invalid.self) { try evil.checkIssuer(discoveryIssuer: "https://accounts.google.com") }
    }

    @Test("exp with 60 s leeway, aud as string or array, nbf, sub, alg and kid")
    func claims() {
        let refused: [(String, String)] = [
            ("expired", token { $0["exp"] = .number(now.timeIntervalSince1970 - 61) }),
            ("no exp", token { $0["exp"] = nil }),
            ("wrong aud", token { $0["aud"] = "client-2" }),
            ("aud array without us", token { $0["aud"] = ["client-2", "client-3"] }),
            ("not yet valid", token { $0["nbf"] = .number(now.timeIntervalSince1970 + 120) }),
            ("no sub", token { $0["sub"] = nil }),
            ("HS256", token(header: ["alg": "HS256", "kid": "k1"])),
            ("none", token(header: ["alg": "none", "kid": "k1"])),
            ("no kid", token(header: ["alg": "RS256"])),
        ]
        for (name, token) in refused {
            #expect(throws: GoogleIDToken.Invalid.self, "\(name)") { try GoogleIDToken.parse(token, policy: policy, now: now) }
        }
        #expect((try? GoogleIDToken.parse(token { $0["exp"] = .number(now.timeIntervalSince1970 - 59) }, policy: policy, now: now)) != nil)
        #expect((try? GoogleIDToken.parse(token { $0["aud"] = ["client-2", "client-1"] }, policy: policy, now: now)) != nil)
    }

    @Test("A hosted-domain restriction needs a matching hd")
    func hostedDomain() {
        let restricted = IDTokenPolicy(audiences: ["client-1"], hostedDomains: ["example.com"])
        #expect(throws: GoogleIDToken.Invalid.self) { try GoogleIDToken.parse(token(), policy: restricted, now: now) }
        #expect(throws: GoogleIDToken.Invalid.self) { try GoogleIDToken.parse(token { $0["hd"] = "other.com" }, policy: restricted, now: now) }
        #expect((try? GoogleIDToken.parse(token { $0["hd"] = "Example.com" }, policy: restricted, now: now)) != nil)
    }
}
