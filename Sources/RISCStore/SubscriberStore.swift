import Foundation
import Logging
import PostgresNIO
import RISC

/// The subscribers the app's services registered to hear of actions: their URLs, the action kinds each wants, and
/// their signing secrets, sealed at rest (RISC_VAULT_KEY), rotated, and kept to RISC_SUBSCRIBERS' list for the
/// configured ones. Their notifications are the outbox's (`NotificationOutbox`).
public struct SubscriberStore: SealingStore {
    let client: PostgresClient
    let logger: Logger
    /// Each call's bound (RISC_DATABASE_TIMEOUT), the same for the admin API, the CLI and the dispatchers.
    let timeout: Duration
    /// Seals and opens subscribers' secrets (RISC_VAULT_KEY); nil without the key: then no subscriber can be added and
    /// no sealed secret read.
    let cipher: VaultCipher?

    public init(client: PostgresClient, timeout: Duration = .seconds(5), cipher: VaultCipher? = nil, logger: Logger) {
        (self.client, self.timeout, self.cipher, self.logger) = (client, timeout, cipher, logger)
    }

    /// A subscriber from RISC_SUBSCRIBERS gets a new secret there, not through `rotateSecret`.
    public struct ConfiguredSubscriber: Error, CustomStringConvertible {
        public var description: String { "the subscriber comes from RISC_SUBSCRIBERS: change its secret there" }
    }

    static let secrets = "subscribers' secrets"

    /// Adds a subscriber, its secret sealed; it hears of actions taken from now on. Returns its id.
    public func add(_ subscriber: NewSubscriber) async throws -> Int64 {
        let cipher = try requireCipher()
        return try await bounded { connection in
            try await connection.transaction(logger: logger) { connection in
                var id: Int64 = 0
                for try await inserted in try await connection.query(
                    "INSERT INTO risc_subscribers (url, secret, actions) VALUES (\(subscriber.url), '', \(subscriber.actions)) RETURNING id",
                    logger: logger
                ).decode(Int64.self) { id = inserted }
                try await storeSealed(subscriber.secret, id: id, cipher: cipher, on: connection)
                return id
            }
        }
    }

    /// Seals `secret` under the subscriber's id and the current key, in place of whatever the row held.
    private func storeSealed(_ secret: String, id: Int64, cipher: VaultCipher, on connection: PostgresConnection) async throws {
        let sealed = try cipher.seal(secret, subscriberID: id)
        try await connection.query(
            "UPDATE risc_subscribers SET secret = NULL, secret_sealed = \(sealed), secret_key_id = \(cipher.currentKeyID) WHERE id = \(id)",
            logger: logger)
    }

    /// A subscriber's new secret, and whether the old one was kept to sign beside it.
    public struct SecretRotation: Sendable, Equatable {
        public let secret: String
        /// False when the old secret could not be opened (sealed under a vault key no longer configured): there is
        /// nothing to sign with beside the new one.
        public let previousKept: Bool
    }

    /// A new secret for subscriber `id`, returned (shown once); nil if there is none. The old one stays valid for
    /// `previousSecretLifetime`: each delivery meanwhile carries both signatures. Its notifications are kept. An old
    /// secret that cannot be opened (its vault key lost) is dropped: the new one is issued all the same, and the
    /// deliveries held back for want of a secret go out signed with it.
    public func rotateSecret(subscriber id: Int64) async throws -> SecretRotation? {
        let cipher = try requireCipher()
        return try await bounded { connection in
            try await connection.transaction(logger: logger) { connection -> SecretRotation? in
                var (exists, current): (Bool, String?) = (false, nil)
                for try await (clear, sealed, keyID, configured) in try await connection.query(
                    "SELECT secret, secret_sealed, secret_key_id, configured FROM risc_subscribers WHERE id = \(id) FOR UPDATE", logger: logger
                ).decode((String?, Data?, String?, Bool).self) {
                    // RISC_SUBSCRIBERS holds its secret: the next dispatcher to start would put that one back.
                    if configured { throw ConfiguredSubscriber() }
                    exists = true
                    current = clear ?? sealed.flatMap { try? cipher.open($0, keyID: keyID ?? "", subscriberID: id) }
                }
                guard exists else { return nil }
                let secret = StandardWebhook.generateSecret()
                let sealed = try cipher.seal(secret, subscriberID: id)
                let previous = try current.map { try cipher.seal($0, subscriberID: id) }
                try await connection.query(
                    """
                    UPDATE risc_subscribers
                       SET secret = NULL, secret_sealed = \(sealed), secret_key_id = \(cipher.currentKeyID),
                           previous_secret_sealed = \(previous), previous_secret_key_id = \(previous == nil ? nil : cipher.currentKeyID),
                           previous_secret_until = CASE WHEN \(previous)::bytea IS NOT NULL
                                                        THEN now() + make_interval(secs => \(Self.previousSecretLifetime)) END
                     WHERE id = \(id)
                    """, logger: logger)
                if current == nil {
                    logger.warning(
                        "A subscriber's old secret could not be opened: its new secret was issued without it",
                        metadata: ["subscriber_id": "\(id)"])
                }
                return SecretRotation(secret: secret, previousKept: current != nil)
            }
        }
    }

    /// How long a rotated-out secret still signs deliveries: 24 hours.
    public static let previousSecretLifetime: Double = 24 * 3600

    /// Seals every secret still in clear (a row from before secrets were sealed) and, with `rekey` (`vault rotate`),
    /// every one under an older key, under the current key; returns how many rows changed. A rotated-out secret
    /// past its 24 hours is dropped first. A dispatcher seals what is in clear when it starts, but never re-keys:
    /// during a key rollout, instances still on the old key must go on opening the secrets.
    public func resealSecrets(rekey: Bool) async throws -> Int {
        let cipher = try requireCipher()
        return try await bounded { connection in
            try await connection.transaction(logger: logger) { connection in
                var changed = 0
                try await connection.query(
                    """
                    UPDATE risc_subscribers SET previous_secret_sealed = NULL, previous_secret_key_id = NULL, previous_secret_until = NULL
                     WHERE previous_secret_until <= now()
                    """, logger: logger)
                let rows = try await connection.query(
                    """
                    SELECT id, secret, secret_sealed, secret_key_id, previous_secret_sealed, previous_secret_key_id FROM risc_subscribers
                     WHERE secret IS NOT NULL
                        OR (\(rekey) AND (secret_key_id <> \(cipher.currentKeyID)
                            OR (previous_secret_sealed IS NOT NULL AND previous_secret_key_id <> \(cipher.currentKeyID))))
                     FOR UPDATE
                    """, logger: logger
                ).decode((Int64, String?, Data?, String?, Data?, String?).self)
                var found: [(Int64, String, String?)] = []
                for try await (id, clear, sealed, keyID, previous, previousKeyID) in rows {
                    let secret = try clear ?? cipher.open(sealed ?? Data(), keyID: keyID ?? "", subscriberID: id)
                    let old = try previous.map { try cipher.open($0, keyID: previousKeyID ?? "", subscriberID: id) }
                    found.append((id, secret, old))
                }
                for (id, secret, old) in found {
                    try await storeSealed(secret, id: id, cipher: cipher, on: connection)
                    if let old {
                        let sealed = try cipher.seal(old, subscriberID: id)
                        try await connection.query(
                            """
                            UPDATE risc_subscribers SET previous_secret_sealed = \(sealed), previous_secret_key_id = \(cipher.currentKeyID)
                             WHERE id = \(id)
                            """, logger: logger)
                    }
                    changed += 1
                }
                return changed
            }
        }
    }

    /// Makes the subscribers from configuration (RISC_SUBSCRIBERS) exactly `configured`, matched by URL: new ones are
    /// added, changed ones updated, and configured ones no longer listed removed. Those added by operators are left
    /// alone. Instances starting together take turns.
    public func syncConfigured(_ configured: [NewSubscriber]) async throws {
        let cipher = try requireCipher()
        // A start-up step of a few statements per subscriber, not an operator's call: bounded as a worker's batch is
        // (30 s). On a loaded machine the request bound (RISC_DATABASE_TIMEOUT) cut it off every time.
        try await client.withConnection(timeout: .seconds(30)) { connection in
            try await connection.transaction(logger: logger) { connection in
                try await connection.query(
                    "SELECT pg_advisory_xact_lock(\(AdvisoryLock.singletonClass), \(AdvisoryLock.configuredSubscribers.rawValue))",
                    logger: logger)
                try await connection.query(
                    "DELETE FROM risc_subscribers WHERE configured AND url <> ALL(\(configured.map(\.url)))", logger: logger)
                for subscriber in configured {
                    // The secret is sealed under the row's id, so the row comes first (its secret a placeholder).
                    var id: Int64 = 0
                    for try await inserted in try await connection.query(
                        """
                        INSERT INTO risc_subscribers (url, secret, actions, configured)
                        VALUES (\(subscriber.url), '', \(subscriber.actions), true)
                        ON CONFLICT (url) WHERE configured DO UPDATE SET actions = EXCLUDED.actions
                        RETURNING id
                        """, logger: logger
                    ).decode(Int64.self) { id = inserted }
                    // Sealed again only when it changed: a restart must not touch a secret in use.
                    var stored: String?
                    for try await (sealed, keyID) in try await connection.query(
                        "SELECT secret_sealed, secret_key_id FROM risc_subscribers WHERE id = \(id)", logger: logger
                    ).decode((Data?, String?).self) {
                        stored = sealed.flatMap { try? cipher.open($0, keyID: keyID ?? "", subscriberID: id) }
                    }
                    if stored != subscriber.secret { try await storeSealed(subscriber.secret, id: id, cipher: cipher, on: connection) }
                }
            }
        }
    }

    public func subscribers() async throws -> [SubscriberRecord] {
        try await bounded { connection in
            var found: [SubscriberRecord] = []
            let rows = try await connection.query(
                """
                SELECT s.id, s.url, s.actions, s.configured, s.created_at,
                       (SELECT count(*) FROM risc_notifications n WHERE n.subscriber_id = s.id AND n.status = \(NotificationStatus.pending))::int8,
                       (SELECT count(*) FROM risc_notifications n WHERE n.subscriber_id = s.id AND n.status = \(NotificationStatus.dead))::int8,
                       s.secret, s.secret_sealed, s.secret_key_id
                FROM risc_subscribers s ORDER BY s.id
                """, logger: logger)
            for try await (id, url, actions, configured, createdAt, pending, dead, clear, sealed, keyID) in rows.decode(
                (Int64, String, [ActionKind]?, Bool, Date, Int64, Int64, String?, Data?, String?).self)
            {
                // Judged with this process's keys, as a dispatcher configured alike judges it.
                let paused = openSecret(clear: clear, sealed: sealed, keyID: keyID, subscriber: id).problem
                found.append(
                    SubscriberRecord(
                        id: id, url: URLPolicy.redacted(url), actions: actions, configured: configured, createdAt: createdAt,
                        pending: Int(pending), dead: Int(dead), paused: paused))
            }
            return found
        }
    }

    /// Removes a subscriber and its pending and dead notifications (never sent now); its delivered ones stay, a record
    /// of what it was sent, until retention deletes them. False if there was none.
    public func remove(subscriber id: Int64) async throws -> Bool {
        try await bounded { connection in
            let rows = try await connection.query("DELETE FROM risc_subscribers WHERE id = \(id) RETURNING id", logger: logger)
            for try await _ in rows.decode(Int64.self) { return true }
            return false
        }
    }

    /// A subscriber as a dispatcher sees it (it claims one subscriber at a time): whether its secret can be opened here.
    public struct DeliveryTarget: Sendable, Equatable {
        public let id: Int64
        /// Why its sealed secret cannot be opened with this process's vault keys; nil when it can (or is in clear).
        public let secretProblem: String?
    }

    /// Every subscriber, and whether its secret opens here: a dispatcher takes no notification of one whose secret
    /// does not (it could not sign them), and reports it.
    public func deliveryTargets() async throws -> [DeliveryTarget] {
        try await bounded { connection in
            var targets: [DeliveryTarget] = []
            for try await (id, clear, sealed, keyID) in try await connection.query(
                "SELECT id, secret, secret_sealed, secret_key_id FROM risc_subscribers ORDER BY id", logger: logger
            ).decode((Int64, String?, Data?, String?).self) {
                targets.append(DeliveryTarget(id: id, secretProblem: openSecret(clear: clear, sealed: sealed, keyID: keyID, subscriber: id).problem))
            }
            return targets
        }
    }

    /// A subscriber's secret, opened, or why it cannot be: sealed under a vault key this process does not have, or
    /// sealed with RISC_VAULT_KEY not set here. Never the secret in the reason.
    func openSecret(clear: String?, sealed: Data?, keyID: String?, subscriber id: Int64) -> (secret: String?, problem: String?) {
        Self.openSecret(with: cipher, clear: clear, sealed: sealed, keyID: keyID, subscriber: id)
    }

    /// The same with a given cipher: the outbox opens the secrets of the deliveries it hands out.
    static func openSecret(
        with cipher: VaultCipher?, clear: String?, sealed: Data?, keyID: String?, subscriber id: Int64
    ) -> (secret: String?, problem: String?) {
        guard let sealed else { return (clear, nil) }
        guard let cipher else { return (nil, "the subscriber's secret is sealed and RISC_VAULT_KEY is not set") }
        guard let secret = try? cipher.open(sealed, keyID: keyID ?? "", subscriberID: id) else {
            return (nil, "the subscriber's secret cannot be opened with the configured vault keys")
        }
        return (secret, nil)
    }
}
