import Foundation
import Logging
import PostgresNIO
import RISC

/// The notification outbox: subscribers, their notifications, and the dispatchers' claims on them.
/// Rows are written by the database itself, in the transaction that records each action (routine risc_notify_subscribers);
/// this is everything else: the admin API's and CLI's reads and replays, and the dispatchers' side.
public struct NotificationStore: Sendable {
    public static let channel = "risc_notifications"

    let client: PostgresClient
    let logger: Logger
    /// Each call's bound (RISC_DATABASE_TIMEOUT), the same for the admin API, the CLI and the dispatchers.
    let timeout: Duration
    /// Seals and opens subscribers' secrets (RISC_VAULT_KEY); nil without the key: then no subscriber can be added and
    /// no sealed secret read.
    let cipher: VaultCipher?

    public init(client: PostgresClient, timeout: Duration = .seconds(5), cipher: VaultCipher? = nil, logger: Logger) {
        self.client = client
        self.timeout = timeout
        self.cipher = cipher
        self.logger = logger
    }

    /// A subscriber from RISC_SUBSCRIBERS gets a new secret there, not through `rotateSecret`.
    public struct ConfiguredSubscriber: Error, CustomStringConvertible {
        public var description: String { "the subscriber comes from RISC_SUBSCRIBERS: change its secret there" }
    }

    /// Adding a subscriber, or giving it a new secret, needs the vault key.
    public struct VaultKeyMissing: Error, CustomStringConvertible {
        public var description: String { "RISC_VAULT_KEY is not set: subscribers' secrets are stored sealed with it" }
    }

    private func requireCipher() throws -> VaultCipher {
        guard let cipher else { throw VaultKeyMissing() }
        return cipher
    }

    private func bounded<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await client.withConnection(timeout: timeout, body)
    }

    // MARK: Subscribers

    /// A subscriber as given by an operator, checked: an https URL (http on loopback), a `whsec_` secret
    /// (generated when none is given), and action kinds from `ActionKind.notified` (nil: all).
    public struct NewSubscriber: Sendable {
        public let url: String
        public let secret: String
        public let actions: [ActionKind]?

        public init(url: String, secret: String?, actions: [String]?) throws(AdminQueries.InvalidParameter) {
            if let problem = URLPolicy.subscriberURLProblem(url) { throw .init(name: "url", problem: problem) }
            if let secret, StandardWebhook.key(secret: secret) == nil {
                throw .init(name: "secret", problem: "must be whsec_ followed by 24 to 64 bytes in base64")
            }
            var kinds: [ActionKind]?
            if let actions {
                let names = ActionKind.notified.map(\.rawValue)
                kinds = try actions.map { name throws(AdminQueries.InvalidParameter) in
                    guard let kind = ActionKind(rawValue: name), ActionKind.notified.contains(kind) else {
                        throw .init(name: "actions", problem: "'\(name)' is not one of \(names.joined(separator: ", "))")
                    }
                    return kind
                }
                guard !(kinds ?? []).isEmpty else { throw .init(name: "actions", problem: "must name at least one action kind") }
            }
            self.url = url
            self.secret = secret ?? StandardWebhook.generateSecret()
            self.actions = kinds
        }
    }

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
                        id: id, url: url, actions: actions, configured: configured, createdAt: createdAt, pending: Int(pending), dead: Int(dead),
                        paused: paused))
            }
            return found
        }
    }

    /// Removes a subscriber and its notifications (undelivered ones are not sent). False if there was none.
    public func remove(subscriber id: Int64) async throws -> Bool {
        try await bounded { connection in
            let rows = try await connection.query("DELETE FROM risc_subscribers WHERE id = \(id) RETURNING id", logger: logger)
            for try await _ in rows.decode(Int64.self) { return true }
            return false
        }
    }

    // MARK: Notifications, for admins

    public struct Filter: Sendable {
        public var status: NotificationStatus?
        public var subscriber: Int64?
        public var sub: String?
        public var limit = 50
        public var cursor: String?
        public init() {}

        public static func parse(
            status: String?, subscriber: String?, sub: String?, limit: String?, cursor: String?
        ) throws(AdminQueries.InvalidParameter) -> Filter {
            var filter = Filter()
            if let status {
                guard let known = NotificationStatus(rawValue: status) else {
                    throw .init(name: "status", problem: "must be one of \(NotificationStatus.allCases.map(\.rawValue).joined(separator: ", "))")
                }
                filter.status = known
            }
            if let subscriber {
                guard let id = Int64(subscriber) else { throw .init(name: "subscriber", problem: "must be a subscriber id (a number)") }
                filter.subscriber = id
            }
            filter.sub = sub
            filter.limit = try AdminQueries.parseLimit(limit)
            filter.cursor = try AdminQueries.checkCursor(cursor)
            return filter
        }
    }

    public func notifications(_ filter: Filter) async throws -> NotificationPage {
        try await bounded { connection in
            let before = filter.cursor.flatMap(AdminQueries.decodeCursor)
            let rows = try await connection.query(
                """
                SELECT \(unescaped: NotificationRecord.columns) FROM risc_notifications
                WHERE (\(filter.status)::text IS NULL OR status = \(filter.status))
                  AND (\(filter.subscriber)::int8 IS NULL OR subscriber_id = \(filter.subscriber))
                  AND (\(filter.sub)::text IS NULL OR sub = \(filter.sub))
                  AND (\(before)::int8 IS NULL OR id < \(before))
                ORDER BY id DESC LIMIT \(filter.limit + 1)
                """, logger: logger)
            var page = NotificationPage(notifications: [])
            for try await row in rows.decode(NotificationRecord.Row.self) {
                if page.notifications.count == filter.limit {
                    page.nextCursor = AdminQueries.encodeCursor(page.notifications.last!.id)
                    break
                }
                page.notifications.append(NotificationRecord(row: row))
            }
            return page
        }
    }

    public func notification(id: Int64) async throws -> NotificationRecord? {
        try await bounded { connection in
            let rows = try await connection.query(
                "SELECT \(unescaped: NotificationRecord.columns) FROM risc_notifications WHERE id = \(id)", logger: logger)
            for try await row in rows.decode(NotificationRecord.Row.self) { return NotificationRecord(row: row) }
            return nil
        }
    }

    public enum ReplayOutcome: Sendable, Equatable {
        case replayed
        case notFound
        /// Still pending: it will be sent anyway.
        case pending
    }

    /// Sends a dead (or delivered) notification again, with the same `webhook-id`, attempts counted afresh.
    public func replay(id: Int64) async throws -> ReplayOutcome {
        try await bounded { connection in
            let rows = try await connection.query(
                """
                WITH target AS (SELECT id, status FROM risc_notifications WHERE id = \(id) FOR UPDATE),
                updated AS (
                    UPDATE risc_notifications n
                    SET status = \(NotificationStatus.pending), attempts = 0, next_attempt_at = now(), last_error = NULL,
                        delivered_at = NULL
                    FROM target WHERE n.id = target.id AND target.status = ANY(\(NotificationStatus.replayable))
                    RETURNING n.id
                )
                SELECT EXISTS (SELECT 1 FROM updated) FROM target
                """, logger: logger)
            var outcome = ReplayOutcome.notFound
            for try await updated in rows.decode(Bool.self) { outcome = updated ? .replayed : .pending }
            if outcome == .replayed { try await connection.query("SELECT pg_notify(\(Self.channel), '')", logger: logger) }
            return outcome
        }
    }

    /// The ids of every dead notification, oldest first (for `notifications replay --dead`).
    public func deadIDs() async throws -> [Int64] {
        try await bounded { connection in
            var ids: [Int64] = []
            for try await id in try await connection.query(
                "SELECT id FROM risc_notifications WHERE status = \(NotificationStatus.dead) ORDER BY id", logger: logger
            ).decode(Int64.self) {
                ids.append(id)
            }
            return ids
        }
    }

    // MARK: Dispatchers

    /// One notification taken for delivery: what to send, where, and with which key.
    public struct Delivery: Sendable {
        public let id: Int64
        public let webhookID: String
        public let notification: ActionNotification
        /// Including the one about to be made.
        public let attempt: Int
        public let subscriberID: Int64
        public let url: String
        /// The secret that signs, opened; nil if it cannot be (`secretProblem` says why).
        public let secret: String?
        /// A secret rotated out less than 24 hours ago, which signs too.
        public let previousSecret: String?
        public let secretProblem: String?
        /// The trace of the request that stored the notification's event (tracing on), which the delivery continues.
        public let traceparent: String?
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
        guard let sealed else { return (clear, nil) }
        guard let cipher else { return (nil, "the subscriber's secret is sealed and RISC_VAULT_KEY is not set") }
        guard let secret = try? cipher.open(sealed, keyID: keyID ?? "", subscriberID: id) else {
            return (nil, "the subscriber's secret cannot be opened with the configured vault keys")
        }
        return (secret, nil)
    }

    /// Gives back a notification taken for delivery but not sent (its subscriber's secret could not be opened): its
    /// attempt is not counted, and it is due again at once, for a dispatcher that can open the secret. Only while
    /// that attempt still holds the row.
    public func release(_ delivery: Delivery) async throws {
        try await bounded { connection in
            _ = try await connection.query(
                """
                UPDATE risc_notifications SET attempts = attempts - 1, next_attempt_at = now()
                WHERE id = \(delivery.id) AND status = \(NotificationStatus.pending) AND attempts = \(Int32(delivery.attempt))
                """, logger: logger)
        }
    }

    /// Takes up to `limit` due notifications of one subscriber, only the oldest pending one of each of its users, so a
    /// user's notifications go out in order. Each is counted as an attempt and leased for `lease`: if the
    /// dispatcher dies mid-delivery, it comes due again then. Other dispatchers skip what is taken (`SKIP LOCKED`).
    public func claim(subscriber: Int64, limit: Int, lease: Duration) async throws -> [Delivery] {
        try await bounded { connection in
            let rows = try await connection.query(try Self.claimQuery(subscriber: subscriber, limit: limit, lease: lease), logger: logger)
            var claimed: [Delivery] = []
            for try await (id, webhookID, kind, sub, count, eventID, jti, eventType, occurredAt, attempt, subscriberID, url, clear, sealed,
                keyID, previousSealed, previousKeyID, traceparent, issuedAt)
                in rows.decode(
                    (Int64, String, String, String, Int32, Int64, String, String, Date, Int32, Int64, String, String?, Data?, String?, Data?,
                     String?, String?, Date?).self)
            {
                let (secret, problem) = openSecret(clear: clear, sealed: sealed, keyID: keyID, subscriber: subscriberID)
                let previous = previousSealed.flatMap { try? cipher?.open($0, keyID: previousKeyID ?? "", subscriberID: subscriberID) }
                let notification = ActionNotification(
                    kind: kind, sub: sub.isEmpty ? nil : sub, count: Int(count), eventID: eventID, jti: jti, eventType: eventType,
                    issuedAt: issuedAt, occurredAt: occurredAt)
                claimed.append(
                    Delivery(
                        id: id, webhookID: webhookID, notification: notification, attempt: Int(attempt), subscriberID: subscriberID,
                        url: url, secret: secret, previousSecret: previous, secretProblem: problem, traceparent: traceparent))
            }
            return claimed.sorted { $0.id < $1.id }
        }
    }

    /// The claim's statement (a test reads its plan). The candidates come in the order of the pending-due index,
    /// (subscriber_id, next_attempt_at, id), which the LIMIT stops early; "the oldest of its user" is a subquery on
    /// the pending-order index run per candidate. Before the table's first ANALYZE, PostgreSQL planned an anti-join
    /// here as a nested loop over every pending row, quadratic in the backlog.
    public static func claimQuery(subscriber: Int64, limit: Int, lease: Duration) throws -> PostgresQuery {
        let leaseSeconds = Double(lease.components.seconds) + Double(lease.components.attoseconds) / 1e18
        return try """
            WITH due AS (
                SELECT n.id FROM risc_notifications n
                WHERE n.status = \(NotificationStatus.pending) AND n.subscriber_id = \(subscriber) AND n.next_attempt_at <= now()
                  AND n.id = (
                      SELECT head.id FROM risc_notifications head
                      WHERE head.status = \(NotificationStatus.pending) AND head.subscriber_id = n.subscriber_id AND head.sub = n.sub
                      ORDER BY head.id LIMIT 1)
                ORDER BY n.next_attempt_at, n.id LIMIT \(limit)
                FOR UPDATE OF n SKIP LOCKED
            )
            UPDATE risc_notifications n
            SET attempts = n.attempts + 1, last_attempt_at = now(), next_attempt_at = now() + make_interval(secs => \(leaseSeconds))
            FROM due, risc_subscribers s
            WHERE n.id = due.id AND s.id = n.subscriber_id
            RETURNING n.id, n.webhook_id, n.kind, n.sub, n.count, n.event_id, n.event_jti, n.event_type, n.occurred_at,
                      n.attempts, s.id, s.url, s.secret, s.secret_sealed, s.secret_key_id,
                      CASE WHEN s.previous_secret_until > now() THEN s.previous_secret_sealed END, s.previous_secret_key_id,
                      n.traceparent, n.event_issued_at
            """
    }

    /// Answered 2xx: done. Several at once (the dispatcher records its deliveries in one statement). Each only if
    /// its attempt still holds the row, as for a failure: a record that comes after the lease ran out, once
    /// another dispatcher has taken the row again, changes nothing (that attempt decides, and a user's next
    /// notification is not released while this one may still be sent). Returns how many were recorded.
    public func markDelivered(_ deliveries: [(id: Int64, attempt: Int)]) async throws -> Int {
        try await bounded { connection in
            var recorded = 0
            for try await count in try await connection.query(
                """
                WITH done AS (
                    UPDATE risc_notifications n SET status = \(NotificationStatus.delivered), delivered_at = now(), last_error = NULL
                    FROM unnest(\(deliveries.map(\.id)), \(deliveries.map { Int32($0.attempt) })) AS d(id, attempts)
                    WHERE n.id = d.id AND n.attempts = d.attempts AND n.status = \(NotificationStatus.pending)
                    RETURNING 1
                )
                SELECT count(*)::int8 FROM done
                """, logger: logger
            ).decode(Int64.self) {
                recorded = Int(count)
            }
            return recorded
        }
    }

    /// A failed attempt: due again after `retryAfter` seconds, or dead when nil. Only if no other dispatcher has
    /// taken the row since (its lease ran out): that one's attempt decides.
    public func markFailed(_ delivery: Delivery, error: String, retryAfter: Double?) async throws {
        try await bounded { connection in
            _ = try await connection.query(
                """
                UPDATE risc_notifications
                SET status = \(retryAfter == nil ? NotificationStatus.dead : NotificationStatus.pending), last_error = \(error),
                    next_attempt_at = now() + make_interval(secs => \(retryAfter ?? 0))
                WHERE id = \(delivery.id) AND status = \(NotificationStatus.pending) AND attempts = \(Int32(delivery.attempt))
                """, logger: logger)
        }
    }
}
