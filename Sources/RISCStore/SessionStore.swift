import Crypto
import Foundation
import Logging
import PostgresNIO
import RISC

/// A user as the API shows it.
public struct UserView: Sendable, Equatable {
    public var sub: String
    public var email: String?
    public var emailVerified: Bool?
    public var name: String?
    public var picture: String?
    public var hd: String?

    /// The `user` object of sign-in and the session check.
    public var jsonValue: JSONValue {
        var object: [String: JSONValue] = ["sub": .string(sub)]
        if let email { object["email"] = .string(email) }
        if let emailVerified { object["email_verified"] = .bool(emailVerified) }
        if let name { object["name"] = .string(name) }
        if let picture { object["picture"] = .string(picture) }
        if let hd { object["hd"] = .string(hd) }
        return .object(object)
    }
}

/// The account flags a session check reports.
public struct AccountFlags: Sendable, Equatable {
    public var signInDisabled = false
    public var reviewRequired = false
    public var credentialChangeRequired = false

    public var names: [String] {
        var names: [String] = []
        if signInDisabled { names.append("sign_in_disabled") }
        if reviewRequired { names.append("review_required") }
        if credentialChangeRequired { names.append("credential_change_required") }
        return names
    }
}

/// Sessions created from verified Google ID tokens. Only a SHA-256 of each token is stored.
public struct SessionStore: Sendable {
    public enum SignInOutcome: Sendable {
        case signedIn(token: String, expiresAt: Date, user: UserView)
        /// An account-disabled event turned Google sign-in off for this user.
        case signInDisabled
        /// The ID token was issued at or before the user's sessions were last revoked: it may be a hijacker's copy.
        case tokenPredatesRevocation
    }

    public enum Lookup: Sendable {
        case valid(user: UserView, createdAt: Date, expiresAt: Date, flags: AccountFlags)
        case revoked
        /// Unknown or expired.
        case invalid
    }

    let client: PostgresClient
    let cache: SessionCache?
    /// Recent "no such session" answers, so that repeating an unknown token does not reach the database each time.
    let misses: SessionMissCache
    let logger: Logger
    public let sessionLifetime: Duration
    /// A user's live sessions at most (RISC_MAX_SESSIONS_PER_USER): a sign-in beyond it ends the oldest. An ID token
    /// can be replayed for its hour; without a cap each replay would add a session for good.
    public let maxSessionsPerUser: Int
    /// How long a call waits for the database before it throws `TimeoutError` (RISC_DATABASE_TIMEOUT). With the
    /// database down, the pool would otherwise keep a caller waiting about a minute, and the app's every
    /// request behind it.
    public let databaseTimeout: Duration

    public init(
        client: PostgresClient, cache: SessionCache? = nil, sessionLifetime: Duration = .seconds(14 * 24 * 3600),
        maxSessionsPerUser: Int = 50, databaseTimeout: Duration = .seconds(5), misses: SessionMissCache = SessionMissCache(),
        logger: Logger
    ) {
        self.client = client
        self.cache = cache
        self.misses = misses
        self.sessionLifetime = sessionLifetime
        self.maxSessionsPerUser = maxSessionsPerUser
        self.databaseTimeout = databaseTimeout
        self.logger = logger
    }

    /// 256 random bits, base64url without padding.
    static func newToken() -> String { Base64URL.random(bytes: 32) }

    public static func tokenHash(_ token: String) -> Data {
        Data(SHA256.hash(data: Data(token.utf8)))
    }

    /// Creates or updates the user by `sub` and creates a session, unless sign-in is disabled for them (checked
    /// first) or the ID token predates their last session revocation; a refused sign-in writes nothing.
    /// Committed before it returns, so the token works at once on any connection.
    public func signIn(_ profile: GoogleIDToken.Profile, issuedAt: Date) async throws -> SignInOutcome {
        try await signIn(profile, issuedAt: issuedAt, token: Self.newToken())
    }

    /// Sign-in with the token chosen (by the tests: the service always mints a fresh one).
    func signIn(_ profile: GoogleIDToken.Profile, issuedAt: Date, token: String) async throws -> SignInOutcome {
        let hash = Self.tokenHash(token)
        let lifetime = Double(sessionLifetime.components.seconds)
        let logger = self.logger
        let result: SignInOutcome = try await client.transaction(timeout: databaseTimeout, logger: logger) { connection in
            // The user's lock before any of the user's rows, as every worker action takes it (routine risc_lock_user): no
            // event for this user is being applied while we decide, and the two cannot deadlock.
            try await connection.query("SELECT risc_lock_user(\(profile.sub))", logger: logger)
            let state = try await connection.query(
                "SELECT sign_in_disabled, sessions_revoked_before FROM risc_users WHERE sub = \(profile.sub)", logger: logger)
            var refusal: SignInOutcome?
            for try await (disabled, revokedBefore) in state.decode((Bool, Date?).self) {
                // A disabled account is refused as such whatever the token's age: the more specific answer wins
                // (a token minted in the second of a hijacking's revocation would otherwise read as invalid).
                if disabled {
                    refusal = .signInDisabled
                } else if let revokedBefore, issuedAt <= revokedBefore {
                    refusal = .tokenPredatesRevocation
                }
            }
            if let refusal { return refusal }
            try await connection.query(
                """
                INSERT INTO risc_users AS u (sub, email, email_verified, name, picture, hd, last_sign_in_at)
                VALUES (\(profile.sub), \(profile.email), \(profile.emailVerified), \(profile.name), \(profile.picture),
                        \(profile.hostedDomain), now())
                ON CONFLICT (sub) DO UPDATE
                   SET email = EXCLUDED.email, email_verified = EXCLUDED.email_verified, name = EXCLUDED.name,
                       picture = EXCLUDED.picture, hd = EXCLUDED.hd, last_sign_in_at = now(), updated_at = now()
                """, logger: logger)
            // Stamped with the time it is really created, so a revocation committed before it cannot miss it.
            let session = try await connection.query(
                """
                INSERT INTO risc_sessions (token_hash, sub, created_at, expires_at)
                VALUES (\(hash), \(profile.sub), clock_timestamp(), clock_timestamp() + make_interval(secs => \(lifetime)))
                RETURNING expires_at
                """, logger: logger)
            var expiresAt = Date()
            for try await value in session.decode(Date.self) { expiresAt = value }
            // Over the cap, the oldest live sessions end as a sign-out does (their rows deleted; the trigger tells
            // every session cache). Under the user's lock, so concurrent sign-ins cannot both stay over it.
            try await connection.query(
                """
                DELETE FROM risc_sessions WHERE id IN (
                    SELECT id FROM risc_sessions
                     WHERE sub = \(profile.sub) AND revoked_at IS NULL AND expires_at > clock_timestamp()
                     ORDER BY created_at DESC, id DESC OFFSET \(maxSessionsPerUser))
                """, logger: logger)
            let user = UserView(
                sub: profile.sub, email: profile.email, emailVerified: profile.emailVerified, name: profile.name,
                picture: profile.picture, hd: profile.hostedDomain)
            return .signedIn(token: token, expiresAt: expiresAt, user: user)
        }
        // Committed: the token is valid from now on, whatever a check may have cached about it (see SessionMissCache).
        if case .signedIn = result { misses.remove(hash) }
        return result
    }

    /// The hot path of every API call the app makes: the cache, else one prepared statement. An unknown token is
    /// remembered as such for a few seconds (SessionMissCache), so that repeating it costs the database nothing.
    public func lookup(token: String) async throws -> Lookup {
        let hash = Self.tokenHash(token)
        let now = Date()
        if let hit = cache?.lookup(hash, now: now) { return hit }
        if misses.contains(hash) { return .invalid }
        return try await client.withConnection(timeout: databaseTimeout) { connection in
            try await self.lookupInDatabase(hash, now: now, on: connection)
        }
    }

    private func lookupInDatabase(_ hash: Data, now: Date, on connection: PostgresConnection) async throws -> Lookup {
        let epoch = cache?.currentEpoch()
        for try await row in try await connection.executePrepared(LookupSession(hash: hash), logger: logger) {
            if row.revoked { return .revoked }
            // Not remembered: a revocation may still reach an expired session, and its answer becomes session_revoked.
            guard row.expiresAt > now else { return .invalid }
            let valid = Lookup.valid(user: row.user, createdAt: row.createdAt, expiresAt: row.expiresAt, flags: row.flags)
            if let cache, let epoch { cache.store(hash, sub: row.user.sub, valid, readAt: epoch) }
            return valid
        }
        // No such session at all: only sign-in makes one, under a token it mints (see SessionMissCache).
        misses.insert(hash)
        return .invalid
    }

    /// Signs out: the session is deleted. False when there was none.
    public func end(token: String) async throws -> Bool {
        let hash = Self.tokenHash(token)
        let logger = self.logger
        let deleted = try await client.withConnection(timeout: databaseTimeout) { connection in
            var deleted = false
            let rows = try await connection.query("DELETE FROM risc_sessions WHERE token_hash = \(hash) RETURNING id", logger: logger)
            for try await _ in rows { deleted = true }
            return deleted
        }
        cache?.remove(hash)
        return deleted
    }
}

private struct LookupSession: PostgresPreparedStatement {
    static let sql = """
        SELECT s.created_at, s.expires_at, s.revoked_at IS NOT NULL, u.sub, u.email, u.email_verified, u.name, u.picture,
               u.hd, u.sign_in_disabled, u.review_required, u.credential_change_required
        FROM risc_sessions s JOIN risc_users u ON u.sub = s.sub
        WHERE s.token_hash = $1
        """

    struct Row {
        var createdAt: Date
        var expiresAt: Date
        var revoked: Bool
        var user: UserView
        var flags: AccountFlags
    }

    let hash: Data

    init(hash: Data) { self.hash = hash }

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 1)
        try bindings.append(hash)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        let (createdAt, expiresAt, revoked, sub, email, emailVerified, name, picture, hd, disabled, review, credential) =
            try row.decode((Date, Date, Bool, String, String?, Bool?, String?, String?, String?, Bool, Bool, Bool).self)
        return Row(
            createdAt: createdAt, expiresAt: expiresAt, revoked: revoked,
            user: UserView(sub: sub, email: email, emailVerified: emailVerified, name: name, picture: picture, hd: hd),
            flags: AccountFlags(signInDisabled: disabled, reviewRequired: review, credentialChangeRequired: credential))
    }
}
