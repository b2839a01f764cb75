import DevTransmitter
import Foundation
import PostgresNIO
import RISC
import RISCStore
import RISCWorker
import Testing

/// One end-to-end test per event-action rule: real sessions and grants, a SET through the transmitter's delivery
/// path, the worker, and the visible result. Each runs both ways an event is applied: on receipt, in the
/// transaction that stores it (`serve`), and by a worker from the stored row (`serve --no-worker` + `worker`).
@Suite("What each event does, end to end")
struct EventActionTests {
    enum Applied: String, CaseIterable, CustomTestStringConvertible {
        case onReceipt = "on receipt"
        case byWorker = "by the worker"
        var testDescription: String { rawValue }
    }

    static func options(_ applied: Applied) -> Harness.Options {
        var options = Harness.Options()
        options.worker = true
        options.applyOnReceipt = applied == .onReceipt
        return options
    }

    func user() -> String { "user-\(UUID().uuidString.prefix(8))" }

    @Test("sessions-revoked ends every earlier session; a later sign-in works", arguments: Applied.allCases)
    func sessionsRevoked(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            let sub = user()
            let first = try await harness.newSession(sub: sub)
            let second = try await harness.newSession(sub: sub)
            #expect(try await harness.checkSession(first).status == 200)
            let jti = try await harness.sendAndWait("sessions-revoked", sub: sub)
            for token in [first, second] {
                let reply = try await harness.checkSession(token)
                #expect(reply.status == 401)
                #expect(reply.error == "session_revoked")
            }
            #expect(try await harness.actions(jti: jti) == [.init(kind: "revoke_sessions", rows: 2)])
            let later = try await harness.newSession(sub: sub)
            #expect(try await harness.checkSession(later).status == 200)
        }
    }

    @Test("tokens-revoked ends the sessions and deletes every grant of the user", arguments: Applied.allCases)
    func tokensRevoked(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            let sub = user()
            let session = try await harness.newSession(sub: sub)
            let stored = try await harness.storeGrant(sub: sub, refreshToken: "1//stored-\(UUID().uuidString)")
            let (exchanged, _) = try await harness.exchangeGrant(sub: sub)
            #expect(try await harness.grantToken(exchanged).status == 200)
            let jti = try await harness.sendAndWait("tokens-revoked", sub: sub)
            #expect(try await harness.checkSession(session).error == "session_revoked")
            for grant in [stored, exchanged] {
                let reply = try await harness.grantToken(grant)
                #expect(reply.status == 410)
                #expect(reply.error == "grant_revoked")
                #expect(try await harness.ciphertextIsErased(grantID: grant))
            }
            #expect(
                try await harness.actions(jti: jti) == [.init(kind: "revoke_sessions", rows: 1), .init(kind: "delete_grants", rows: 2)])
        }
    }

    @Test("token-revoked finds the one grant by prefix, or by its hash in every base64 spelling", arguments: Applied.allCases)
    func tokenRevoked(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            let sub = user()
            // By prefix, through the transmitter's own SET.
            let (byPrefix, prefixToken) = try await harness.exchangeGrant(sub: sub)
            let (untouched, _) = try await harness.exchangeGrant(sub: sub)
            let prefixJTI = try await harness.sendAndWait("token-revoked", sub: nil) { request in
                request.token = prefixToken
                request.alg = "prefix"
            }
            #expect(try await harness.grantToken(byPrefix).status == 410)
            #expect(try await harness.ciphertextIsErased(grantID: byPrefix))
            #expect(try await harness.grantToken(untouched).status == 200)
            #expect(
                try await harness.actions(jti: prefixJTI) == [
                    .init(kind: "delete_grant_by_prefix", rows: 1, detail: TokenIdentifier.prefix(of: prefixToken))
                ])

            // By double SHA-512: padded and unpadded, standard and URL-safe alphabets.
            for spelling in 0..<4 {
                let token = "1//hash-\(spelling)-\(UUID().uuidString)?>?>~~"
                let grant = try await harness.storeGrant(sub: sub, refreshToken: token)
                var value = TokenIdentifier.doubleSHA512Base64(of: token)
                if spelling & 1 == 1 { value = value.replacingOccurrences(of: "=", with: "") }
                if spelling & 2 == 2 { value = value.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_") }
                let claims = harness.claims { claims in
                    claims["events"] = [
                        EventType.tokenRevoked.rawValue: [
                            "subject": [
                                "subject_type": "oauth_token", "token_type": "refresh_token",
                                "token_identifier_alg": "hash_base64_sha512_sha512", "token": .string(value),
                            ]
                        ]
                    ]
                }
                let set = try await harness.sign(claims)
                #expect(try await harness.post(set).status == 202)
                #expect(try await harness.waitUntilProcessed(jti: jti(of: set)) == "done")
                #expect(try await harness.grantToken(grant).status == 410, "spelling \(spelling)")
                #expect(try await harness.actions(jti: jti(of: set)).map(\.rows) == [1], "spelling \(spelling)")
            }
            #expect(try await harness.grantToken(untouched).status == 200)
        }
    }

    @Test("account-disabled refuses new sign-ins; hijacking also ends sessions; bulk-account flags for review", arguments: Applied.allCases)
    func accountDisabled(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            // No reason: sign-in refused, existing session kept but flagged.
            let plain = user()
            let kept = try await harness.newSession(sub: plain)
            let jti = try await harness.sendAndWait("account-disabled", sub: plain)
            let refused = try await harness.signIn(sub: plain)
            #expect(refused.status == 403)
            #expect(refused.error == "account_disabled")
            let check = try await harness.checkSession(kept)
            #expect(check.status == 200)
            #expect(check.json["flags"] == ["sign_in_disabled"])
            #expect(try await harness.actions(jti: jti) == [.init(kind: "disable_sign_in", rows: 1)])

            let hijacked = user()
            let ended = try await harness.newSession(sub: hijacked)
            let hijackJTI = try await harness.sendAndWait("account-disabled", sub: hijacked) { $0.reason = "hijacking" }
            #expect(try await harness.checkSession(ended).error == "session_revoked")
            #expect(try await harness.signIn(sub: hijacked).status == 403)
            #expect(
                try await harness.actions(jti: hijackJTI)
                    == [.init(kind: "disable_sign_in", rows: 1, detail: "hijacking"), .init(kind: "revoke_sessions", rows: 1)])

            let bulk = user()
            let bulkSession = try await harness.newSession(sub: bulk)
            let bulkJTI = try await harness.sendAndWait("account-disabled", sub: bulk) { $0.reason = "bulk-account" }
            #expect(try await harness.signIn(sub: bulk).status == 403)
            #expect(try await harness.checkSession(bulkSession).json["flags"] == ["sign_in_disabled", "review_required"])
            #expect(
                try await harness.actions(jti: bulkJTI)
                    == [.init(kind: "disable_sign_in", rows: 1, detail: "bulk-account"), .init(kind: "flag_for_review", rows: 1)])
        }
    }

    @Test("account-enabled lets the user sign in again", arguments: Applied.allCases)
    func accountEnabled(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            let sub = user()
            let now = Date().timeIntervalSince1970.rounded(.down)
            try await harness.sendAndWait("account-disabled", sub: sub) { $0.iat = now - 10 }
            #expect(try await harness.signIn(sub: sub).status == 403)
            let jti = try await harness.sendAndWait("account-enabled", sub: sub) { $0.iat = now }
            let reply = try await harness.signIn(sub: sub)
            #expect(reply.status == 200)
            #expect(reply.json["user"]?.objectValue?["sub"]?.stringValue == sub)
            #expect(try await harness.actions(jti: jti) == [.init(kind: "enable_sign_in", rows: 1)])
        }
    }

    @Test("account-credential-change-required and CAEP credential-change set the flag", arguments: Applied.allCases)
    func credentialChange(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            for type in ["account-credential-change-required", "credential-change"] {
                let sub = user()
                let session = try await harness.newSession(sub: sub)
                let jti = try await harness.sendAndWait(type, sub: sub)
                let check = try await harness.checkSession(session)
                #expect(check.status == 200)
                #expect(check.json["flags"] == ["credential_change_required"], "\(type)")
                #expect(try await harness.actions(jti: jti) == [.init(kind: "require_credential_change", rows: 1)])
            }
        }
    }

    @Test("CAEP session-revoked ends sessions like sessions-revoked", arguments: Applied.allCases)
    func caepSessionRevoked(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            let sub = user()
            let session = try await harness.newSession(sub: sub)
            let jti = try await harness.sendAndWait("session-revoked", sub: sub)
            #expect(try await harness.checkSession(session).error == "session_revoked")
            #expect(try await harness.actions(jti: jti) == [.init(kind: "revoke_sessions", rows: 1)])
        }
    }

    @Test("verification records its state and touches no user", arguments: Applied.allCases)
    func verification(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            let state = "state-\(UUID().uuidString)"
            let jti = try await harness.sendAndWait("verification", sub: nil) { $0.state = state }
            #expect(try await harness.actions(jti: jti) == [.init(kind: "record_verification", rows: 0, detail: state)])
        }
    }

    @Test("A redelivered jti has no second effect", arguments: Applied.allCases)
    func redelivery(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            let sub = user()
            _ = try await harness.newSession(sub: sub)
            let token = try await harness.makeSET("sessions-revoked", sub: sub)
            #expect(try await harness.post(token).status == 202)
            #expect(try await harness.waitUntilProcessed(jti: jti(of: token)) == "done")
            let later = try await harness.newSession(sub: sub)
            #expect(try await harness.post(token).status == 202)
            // A barrier: a later event for the same user, sent once the redelivery's 202 said the transaction storing
            // it had committed. On receipt, each event is applied in that transaction, before its 202. By the worker,
            // a claim takes waiting events in (run_after, id) order, so a row the redelivery had stored would be
            // applied with the barrier's or before it. A row left waiting, or still held by a claim, reads pending below.
            try await harness.sendAndWait("account-credential-change-required", sub: sub)
            try await eventually("the barrier's flag shows, or the later session has ended") {
                let check = try await harness.checkSession(later)
                return check.status != 200 || check.json["flags"] == ["credential_change_required"]
            }
            let check = try await harness.checkSession(later)
            #expect(check.status == 200)
            #expect(check.json["flags"] == ["credential_change_required"])
            #expect(try await harness.actions(jti: jti(of: token)).count == 1)
            #expect(try await harness.stored(jti: jti(of: token)).map(\.status) == ["done"])
        }
    }

    @Test("Out of order by iat: an older account-disabled after a newer account-enabled changes nothing", arguments: Applied.allCases)
    func outOfOrder(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            let sub = user()
            let now = Date().timeIntervalSince1970.rounded(.down)
            try await harness.sendAndWait("account-enabled", sub: sub) { $0.iat = now }
            let stale = try await harness.sendAndWait("account-disabled", sub: sub) { $0.iat = now - 60 }
            #expect(try await harness.signIn(sub: sub).status == 200)
            #expect(
                try await harness.actions(jti: stale) == [
                    .init(kind: "disable_sign_in", rows: 0, detail: "skipped, the account state is newer than the event")
                ])
            // A stale hijacking report leaves the account state alone, and only ends sessions created up to its iat:
            // this one is newer and stays.
            let session = try await harness.newSession(sub: sub)
            let staleHijack = try await harness.sendAndWait("account-disabled", sub: sub) {
                $0.iat = now - 30
                $0.reason = "hijacking"
            }
            #expect(try await harness.checkSession(session).status == 200)
            #expect(
                try await harness.actions(jti: staleHijack) == [
                    .init(kind: "disable_sign_in", rows: 0, detail: "hijacking: skipped, the account state is newer than the event"),
                    .init(kind: "revoke_sessions", rows: 0, detail: "stale event: only sessions created up to its iat"),
                ])
        }
    }

    @Test(
        "Account state follows iat, then arrival: a replayed account-disabled of the same second does not undo a later enable",
        arguments: Applied.allCases)
    func replayKeepsOrder(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            let sub = user()
            let now = Date().timeIntervalSince1970.rounded(.down)
            let disabled = try await harness.sendAndWait("account-disabled", sub: sub) { $0.iat = now }
            try await harness.sendAndWait("account-enabled", sub: sub) { $0.iat = now }
            #expect(try await harness.signIn(sub: sub).status == 200)
            var id: Int64?
            for try await value in try await harness.database.query("SELECT id FROM risc_events WHERE jti = \(disabled)").decode(Int64.self) {
                id = value
            }
            let events = EventAdmin(client: harness.database, logger: Harness.logger)
            #expect(try await events.replay(id: try #require(id)) == .replayed)
            #expect(try await harness.waitUntilProcessed(jti: disabled) == "done")
            #expect(try await harness.signIn(sub: sub).status == 200, "the replayed, earlier event must not disable the account")
            #expect(
                try await harness.actions(jti: disabled).last
                    == .init(kind: "disable_sign_in", rows: 0, detail: "skipped, the account state is newer than the event"))
        }
    }

    @Test("A refused sign-in changes nothing about the user: not the profile, not last_sign_in_at", arguments: Applied.allCases)
    func refusedSignInWritesNothing(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            let sub = user()
            _ = try await harness.newSession(sub: sub)
            func profile() async throws -> [String] {
                var row: [String] = []
                for try await (email, name, lastSignIn, updated) in try await harness.database.query(
                    "SELECT email, coalesce(name, ''), last_sign_in_at::text, updated_at::text FROM risc_users WHERE sub = \(sub)"
                ).decode((String?, String, String, String).self) {
                    row = [email ?? "<null>", name, lastSignIn, updated]
                }
                return row
            }
            try await harness.sendAndWait("account-disabled", sub: sub)
            let before = try await profile()
            let token = try await harness.idToken(sub: sub) {
                $0.email = nil
                $0.name = "Someone Else"
            }
            let reply = try await harness.call(.POST, "/tokensignin", form: ["idtoken": token])
            #expect(reply.status == 403)
            #expect(try await profile() == before)
            #expect(before.first == "\(sub)@example.com")
        }
    }

    @Test("A disabled account answers 403 account_disabled whatever the ID token's age", arguments: Applied.allCases)
    func disabledWinsOverTokenAge(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            // A hijacking both disables sign-in and revokes sessions; an ID token from the same second as that
            // revocation (or older) used to answer 401 invalid_token, the less specific answer.
            let sub = user()
            _ = try await harness.newSession(sub: sub)
            try await harness.sendAndWait("account-disabled", sub: sub) { $0.reason = "hijacking" }
            for age in [0.0, 3600] {
                let token = try await harness.idToken(sub: sub) {
                    $0.iat = Date().timeIntervalSince1970.rounded(.down) - age
                }
                let reply = try await harness.call(.POST, "/tokensignin", form: ["idtoken": token])
                #expect(reply.status == 403, "age \(age): \(reply.body)")
                #expect(reply.error == "account_disabled", "age \(age)")
            }
            // Re-enabled, the same old token is still refused for predating the revocation.
            try await harness.sendAndWait("account-enabled", sub: sub)
            let old = try await harness.idToken(sub: sub) { $0.iat = Date().timeIntervalSince1970.rounded(.down) - 3600 }
            let reply = try await harness.call(.POST, "/tokensignin", form: ["idtoken": old])
            #expect(reply.status == 401)
            #expect(reply.error == "invalid_token")
        }
    }

    @Test("An event for a sub that never signed in is kept, and a later sign-in is refused", arguments: Applied.allCases)
    func unknownSubThenSignIn(_ applied: Applied) async throws {
        try await Harness.with(Self.options(applied)) { harness in
            let sub = user()
            try await harness.sendAndWait("account-disabled", sub: sub)
            let reply = try await harness.signIn(sub: sub, json: true)
            #expect(reply.status == 403)
            #expect(reply.error == "account_disabled")
        }
    }
}
