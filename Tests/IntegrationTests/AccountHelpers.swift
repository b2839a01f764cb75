import Crypto
import DevTransmitter
import Foundation
import NIOHTTP1
import PostgresNIO
import RISC
import RISCStore
import Testing

/// Sign-in, sessions, grants and events, as the app and Google would drive them.
extension Harness {
    func idToken(sub: String, configure: (inout IDTokenRequest) -> Void = { _ in }) async throws -> String {
        var request = IDTokenRequest(sub: sub)
        request.email = "\(sub)@example.com"
        // Google's iat has whole seconds; a token is refused when issued at or before the user's last session
        // revocation, so a "later sign-in" must carry a later second, as it would for a real user.
        request.iat = Date().timeIntervalSince1970.rounded(.down) + 1
        configure(&request)
        return try await transmitter.makeIDToken(request)
    }

    /// Listens on the session caches' channel as they do; returns once listening, with a task that collects the
    /// payloads heard until `enough` says so. The caller cancels the task if it stops waiting.
    func hearSessionChanges(until enough: @escaping @Sendable ([String]) -> Bool) async -> Task<[String], any Error> {
        let (listening, started) = AsyncStream.makeStream(of: Void.self)
        let heard = Task {
            try await database.withConnection { connection in
                try await connection.listen(on: SessionCache.channel) { notifications in
                    started.yield()
                    var payloads: [String] = []
                    for try await notification in notifications {
                        payloads.append(notification.payload)
                        if enough(payloads) { break }
                    }
                    return payloads
                }
            }
        }
        var isListening = listening.makeAsyncIterator()
        _ = await isListening.next()
        return heard
    }

    /// Signs in through `POST /tokensignin` with a fresh ID token; returns the reply.
    func signIn(sub: String, json: Bool = false) async throws -> Reply {
        let token = try await idToken(sub: sub)
        return json
            ? try await call(.POST, "/tokensignin", json: ["idToken": .string(token)])
            : try await call(.POST, "/tokensignin", form: ["idtoken": token])
    }

    /// Signs in and returns the session token, expecting success.
    func newSession(sub: String) async throws -> String {
        let reply = try await signIn(sub: sub)
        #expect(reply.status == 200, "\(reply.body)\n\(warnings.recent)")
        return try #require(reply.json["session_token"]?.stringValue)
    }

    func checkSession(_ token: String) async throws -> Reply {
        try await call(.GET, "/v1/session", bearer: token)
    }

    /// Stores a refresh token through `POST /v1/grants`; returns the grant id.
    func storeGrant(sub: String, refreshToken: String) async throws -> String {
        let reply = try await call(
            .POST, "/v1/grants", bearer: Harness.serviceToken,
            json: ["sub": .string(sub), "refresh_token": .string(refreshToken), "client_id": .string(Harness.audience)])
        #expect(reply.status == 201, "\(reply.body)")
        return try #require(reply.json["grant_id"]?.stringValue)
    }

    /// A grant obtained the real way: a code from the transmitter's authorization step, exchanged with PKCE.
    func exchangeGrant(sub: String) async throws -> (grantID: String, refreshToken: String) {
        let verifier = "verifier-\(UUID().uuidString)-\(UUID().uuidString)"
        let code = try await authorize(sub: sub, verifier: verifier)
        let reply = try await call(
            .POST, "/v1/grants/exchange", bearer: Harness.serviceToken,
            json: [
                "code": .string(code), "code_verifier": .string(verifier), "redirect_uri": "http://127.0.0.1/callback",
                "client_id": .string(Harness.audience),
            ])
        #expect(reply.status == 200, "\(reply.body)")
        let grantID = try #require(reply.json["grant_id"]?.stringValue)
        #expect(reply.json["access_token"]?.stringValue?.hasPrefix("ya29.") == true)
        return (grantID, try await refreshToken(grantID: grantID))
    }

    func authorize(sub: String, verifier: String) async throws -> String {
        let challenge = Base64URL.encode(SHA256Digest.of(verifier))
        let reply = try await call(
            .POST, transmitter.baseURL + "/dev/authorize",
            json: [
                "sub": .string(sub), "client_id": .string(Harness.audience), "redirect_uri": "http://127.0.0.1/callback",
                "code_challenge": .string(challenge), "code_challenge_method": "S256",
            ])
        return try #require(reply.json["code"]?.stringValue)
    }

    /// The plaintext refresh token of a grant, decrypted the way the vault does (test-only view).
    func refreshToken(grantID: String) async throws -> String {
        let id = try #require(UUID(uuidString: grantID))
        let cipher = VaultCipherForTests.cipher
        let rows = try await database.query("SELECT ciphertext, vault_key_id FROM risc_grants WHERE id = \(id)")
        for try await (ciphertext, keyID) in rows.decode((Data, String).self) {
            return try cipher.open(ciphertext, keyID: keyID, grantID: id)
        }
        throw GrantMissing()
    }

    struct GrantMissing: Error {}

    /// Signs a SET and pushes it through the transmitter's own delivery path (as `dev send` does).
    @discardableResult
    func send(_ type: String, sub: String?, configure: (inout SETRequest) -> Void = { _ in }) async throws -> String {
        var request = SETRequest(type: type, sub: sub)
        request.target = eventsURL
        configure(&request)
        let delivery = try await transmitter.send(request)
        #expect(delivery.status == 202, "\(delivery.body)\n\(warnings.recent)")
        return try #require(delivery.jti)
    }

    /// Waits (bounded) until the worker has finished the event with this jti; returns its status.
    @discardableResult
    func waitUntilProcessed(jti: String, timeout: Duration = .seconds(30)) async throws -> String {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let rows = try await database.query("SELECT status FROM risc_events WHERE jti = \(jti)")
            for try await status in rows.decode(String.self) where !["pending", "retry"].contains(status) {
                return status
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        Issue.record("event \(jti) was not processed within \(timeout)")
        return "pending"
    }

    struct RecordedAction: Equatable, CustomStringConvertible {
        var kind: String
        var rows: Int
        var detail: String?
        var description: String { "\(kind):\(rows)" + (detail.map { "(\($0))" } ?? "") }
    }

    /// The actions recorded against an event, in the order they were applied.
    func actions(jti: String) async throws -> [RecordedAction] {
        var actions: [RecordedAction] = []
        let rows = try await database.query(
            """
            SELECT a.kind, a.rows_affected, a.detail FROM risc_event_actions a JOIN risc_events e ON e.id = a.event_id
            WHERE e.jti = \(jti) ORDER BY a.id
            """)
        for try await (kind, count, detail) in rows.decode((String, Int32, String?).self) {
            actions.append(RecordedAction(kind: kind, rows: Int(count), detail: detail))
        }
        return actions
    }

    /// Sends a SET and waits for the worker to finish it; returns its jti.
    @discardableResult
    func sendAndWait(_ type: String, sub: String?, configure: (inout SETRequest) -> Void = { _ in }) async throws -> String {
        let jti = try await send(type, sub: sub, configure: configure)
        #expect(try await waitUntilProcessed(jti: jti) == "done")
        return jti
    }

    func grantToken(_ grantID: String) async throws -> Reply {
        try await call(.POST, "/v1/grants/\(grantID)/token", bearer: Harness.serviceToken)
    }

    func ciphertextIsErased(grantID: String) async throws -> Bool {
        let id = try #require(UUID(uuidString: grantID))
        let rows = try await database.query(
            "SELECT ciphertext IS NULL AND token_prefix IS NULL AND token_hash IS NULL FROM risc_grants WHERE id = \(id)")
        for try await erased in rows.decode(Bool.self) { return erased }
        return false
    }
}

enum VaultCipherForTests {
    static var cipher: VaultCipher { VaultCipher(current: VaultCipher.key(base64: Harness.vaultKey)!) }
}

enum SHA256Digest {
    static func of(_ text: String) -> [UInt8] { Array(SHA256.hash(data: Data(text.utf8))) }
}
