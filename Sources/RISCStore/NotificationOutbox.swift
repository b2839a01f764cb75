import Foundation
import Logging
import PostgresNIO
import RISC

/// The notification outbox: one row per notification of an action to a subscriber, written by the database itself
/// in the transaction that records the action (routine risc_notify_subscribers). Here is the rest of each row's life:
/// the dispatchers' claim, lease and record of the delivery, and the admin API's and CLI's listings and replays.
public struct NotificationOutbox: BoundedStore {
    public static let channel = "risc_notifications"

    let client: PostgresClient
    /// Each call's bound: RISC_DATABASE_TIMEOUT for the admin API and the CLI; the default for the dispatchers.
    let timeout: Duration
    /// Opens the secrets of the subscribers whose notifications are handed out (RISC_VAULT_KEY); nil without the key.
    let cipher: VaultCipher?
    let logger: Logger

    public init(client: PostgresClient, timeout: Duration = .seconds(5), cipher: VaultCipher? = nil, logger: Logger) {
        (self.client, self.timeout, self.cipher, self.logger) = (client, timeout, cipher, logger)
    }

    // MARK: For admins

    public struct Filter: Sendable {
        public var status: NotificationStatus?
        public var subscriber: Int64?
        public var sub: String?
        public var limit = 50
        public var cursor: String?
        public init() {}

        public static func parse(
            status: String?, subscriber: String?, sub: String?, limit: String?, cursor: String?
        ) throws(InvalidParameter) -> Filter {
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
            filter.limit = try AdminPaging.parseLimit(limit)
            filter.cursor = try AdminPaging.checkCursor(cursor)
            return filter
        }
    }

    public func notifications(_ filter: Filter) async throws -> NotificationPage {
        try await bounded { connection in
            let before = filter.cursor.flatMap(AdminPaging.decodeCursor)
            let rows = try await connection.query(
                """
                SELECT \(unescaped: NotificationRecord.columns) FROM risc_notifications
                WHERE (\(filter.status)::text IS NULL OR status = \(filter.status))
                  AND (\(filter.subscriber)::int8 IS NULL OR subscriber_id = \(filter.subscriber))
                  AND (\(filter.sub)::text IS NULL OR sub = \(filter.sub))
                  AND (\(before)::int8 IS NULL OR id < \(before))
                ORDER BY id DESC LIMIT \(filter.limit + 1)
                """, logger: logger)
            let page = try await AdminPaging.page(
                rows.decode(NotificationRecord.Row.self).map(NotificationRecord.init(row:)), limit: filter.limit, id: \.id)
            return NotificationPage(notifications: page.records, nextCursor: page.nextCursor)
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
        /// Delivered to a subscriber since removed (its delivered notifications stay until retention).
        case subscriberRemoved
    }

    /// Sends a dead (or delivered) notification again, with the same `webhook-id`, attempts counted afresh.
    public func replay(id: Int64) async throws -> ReplayOutcome {
        try await bounded { connection in
            try await connection.transaction(logger: logger) { connection in
                // Its subscriber first, share-locked as an action's notifications lock it, and before the notification, in
                // the order a removal takes them: a removal waits for this replay and then deletes the row it made
                // pending; a replay after a removal finds no subscriber, and leaves the row as it is.
                let subscribers = try await connection.values(
                    "SELECT subscriber_id FROM risc_notifications WHERE id = \(id)", as: Int64.self, logger: logger)
                guard let subscriber = subscribers.first else { return ReplayOutcome.notFound }
                let present = try await connection.values(
                    "SELECT id FROM risc_subscribers WHERE id = \(subscriber) FOR KEY SHARE", as: Int64.self, logger: logger)
                guard !present.isEmpty else { return .subscriberRemoved }
                let rows = try await connection.query(
                    """
                    WITH target AS (SELECT id, status FROM risc_notifications WHERE id = \(id) FOR UPDATE),
                    -- A lease left over (a late record) would count attempts the replay starts afresh.
                    unleased AS (
                        DELETE FROM risc_notification_leases l USING target
                        WHERE l.notification_id = target.id AND target.status = ANY(\(NotificationStatus.replayable))
                    ),
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
    }

    /// The ids of every dead notification, oldest first (for `notifications replay --dead`).
    public func deadIDs() async throws -> [Int64] {
        try await bounded { connection in
            try await connection.values(
                "SELECT id FROM risc_notifications WHERE status = \(NotificationStatus.dead) ORDER BY id", as: Int64.self,
                logger: logger)
        }
    }

    // MARK: For dispatchers

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

    /// Gives back a notification taken for delivery but not sent (its subscriber's secret could not be opened): its
    /// attempt is not counted, and it is due again at once, for a dispatcher that can open the secret. Only while
    /// that attempt still holds the row.
    public func release(_ delivery: Delivery) async throws {
        try await bounded { connection in
            _ = try await connection.query(
                """
                DELETE FROM risc_notification_leases
                WHERE notification_id = \(delivery.id) AND attempt = \(Int32(delivery.attempt))
                """, logger: logger)
        }
    }

    /// Takes up to `limit` due notifications of one subscriber, only the oldest pending one of each of its users, so a
    /// user's notifications go out in order. Each is leased for `lease` (risc_notification_leases), its outbox row
    /// left as it is: if the dispatcher dies mid-delivery, it comes due again then, as the next attempt. Two
    /// dispatchers that reach for one row both insert its lease; the second waits for the first's commit and takes nothing.
    public func claim(subscriber: Int64, limit: Int, lease: Duration) async throws -> [Delivery] {
        typealias Row = ClaimDue.Row
        // Only read in the transaction, which holds the leases until it commits; the secrets are opened after.
        let rows: [Row] = try await bounded { connection in
            try await connection.transaction(logger: logger) { connection in
                try await connection.query(Self.planSettings, logger: logger)
                var rows: [Row] = []
                for try await row in try await connection.executePrepared(
                    ClaimDue(subscriber: subscriber, limit: limit, lease: lease), logger: logger)
                {
                    rows.append(row)
                }
                return rows
            }
        }
        return rows.map { row in
            let (
                id, webhookID, kind, sub, count, eventID, jti, eventType, occurredAt, attempt, subscriberID, url, clear, sealed, keyID,
                previousSealed, previousKeyID, traceparent, issuedAt, transmitter, subject
            ) = row
            let (secret, problem) = SubscriberStore.openSecret(with: cipher, clear: clear, sealed: sealed, keyID: keyID, subscriber: subscriberID)
            let previous = previousSealed.flatMap { try? cipher?.open($0, keyID: previousKeyID ?? "", subscriberID: subscriberID) }
            var notification = ActionNotification(
                kind: kind, sub: sub.isEmpty ? nil : sub, count: Int(count), eventID: eventID, jti: jti, eventType: eventType,
                issuedAt: issuedAt, occurredAt: occurredAt)
            notification.received(from: transmitter, subject: subject)
            return Delivery(
                id: id, webhookID: webhookID, notification: notification, attempt: Int(attempt), subscriberID: subscriberID,
                url: url, secret: secret, previousSecret: previous, secretProblem: problem, traceparent: traceparent)
        }.sorted { $0.id < $1.id }
    }

    /// Set for the transactions of the claim and of the record: sorts and sequential scans priced out, so PostgreSQL
    /// walks the pending-due index and stops at the LIMIT, and looks rows up by their keys. Statistics cannot choose
    /// that reliably: an outage fills the outbox with pending rows long before ANALYZE sees them (after 10% of a table
    /// of delivered ones), and an estimate of one row (the lease filter once did that) makes reading and sorting every
    /// pending row look cheapest, so each claim cost the whole backlog. In the lease table, a sequential scan read
    /// every row deleted since the last vacuum, for each candidate. The leases are held until the dispatcher commits:
    /// one whose process freezes first, or whose network goes silent, is cut off after 30 s (a live one gives up
    /// sooner, on its own bound, and closes the connection). Not tighter: a dispatcher starved of CPU is slow between
    /// the statement and its COMMIT, and a session ended there leaves postgres-nio waiting on the COMMIT until that
    /// bound. Both statements are planned once per connection, in general: the claim's LIMIT made every plan for known
    /// values look cheaper, so it was planned again for each claim (about 0.9 ms of PostgreSQL's CPU, tens of
    /// microseconds per notification).
    public static let planSettings: PostgresQuery = """
        SELECT set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true),
               set_config('plan_cache_mode', 'force_generic_plan', true),
               set_config('idle_in_transaction_session_timeout', '30s', true)
        """

    /// The claim's statement, for a test that reads its plan.
    public static var claimSQL: String { ClaimDue.sql }

    /// The record's statement and its parameters' types, for a test that reads its plan.
    public static var recordSQL: String { RecordOutcomes.sql }
    public static var recordParameterTypes: String { RecordOutcomes.parameterTypes }

    /// What became of one attempt, for `record`.
    public enum Outcome: Sendable {
        /// Answered 2xx.
        case delivered
        /// Due again after this many seconds.
        case retry(after: Double, error: String)
        /// Failed its last attempt.
        case dead(error: String)
    }

    /// Records the outcomes of many attempts in one statement: each outbox row is written once, with its outcome and
    /// its attempt counted, and its lease ends. Each only while its attempt still holds the lease: a record that
    /// comes after the lease ran out, once another dispatcher has taken the row again, changes nothing (that attempt
    /// decides, and a user's next notification is not released while this one may still be sent). Returns how many
    /// were recorded.
    @discardableResult
    public func record(_ outcomes: [(id: Int64, attempt: Int, outcome: Outcome)]) async throws -> Int {
        guard !outcomes.isEmpty else { return 0 }
        let rows = outcomes.map { item -> JSONValue in
            // A retry is due again after its delay; a delivered attempt clears the last error.
            let (status, error, delay): (NotificationStatus, String?, Double) =
                switch item.outcome {
                case .delivered: (.delivered, nil, 0)
                case .retry(let after, let error): (.pending, error, after)
                case .dead(let error): (.dead, error, 0)
                }
            return [
                "id": .number(Double(item.id)), "attempt": .number(Double(item.attempt)), "status": .string(status.rawValue),
                "error": error.map(JSONValue.string) ?? .null, "delay": .number(delay),
            ]
        }
        return try await bounded { connection in
            try await connection.transaction(logger: logger) { connection in
                try await connection.query(Self.planSettings, logger: logger)
                var recorded = 0
                // In slices: each row updated reads every outcome of its statement (see RecordOutcomes), and the
                // outcomes of many subscribers, or of records that failed meanwhile, can come to thousands.
                for start in stride(from: 0, to: rows.count, by: RecordOutcomes.maximumOutcomes) {
                    let slice = Array(rows[start..<min(start + RecordOutcomes.maximumOutcomes, rows.count)])
                    for try await count in try await connection.executePrepared(
                        RecordOutcomes(outcomes: JSONValue.array(slice).serialized), logger: logger)
                    {
                        recorded += Int(count)
                    }
                }
                return recorded
            }
        }
    }
}

/// The claim, prepared once per connection and planned once, in general (`planSettings`; a test reads its plan).
/// The candidates come in the order of the pending-due index, (subscriber_id, next_attempt_at, id), which the LIMIT
/// stops early; "the oldest of its user" is a subquery on the pending-order index run per candidate. Before the table's
/// first ANALYZE, PostgreSQL planned an anti-join here as a nested loop over every pending row, quadratic in the backlog.
/// That test is written `id <= (oldest)`, not `id = (oldest)` (the same, as no pending row of the user is older):
/// PostgreSQL takes an equality with a subquery to keep one row in thousands, and then reads every pending row and
/// sorts them rather than walk the index, so each claim cost as much as the whole backlog (87 ms at 14,000).
/// A lease left by an attempt that never recorded its outcome (its dispatcher died) still counts that attempt.
/// The status is written into the text, not bound: a plan made for any value of a parameter cannot use the partial
/// indexes of pending rows.
struct ClaimDue: PostgresPreparedStatement {
    static let sql = """
        WITH due AS (
            SELECT n.id, greatest(n.attempts, coalesce(l.attempt, 0)) + 1 AS attempt
            FROM risc_notifications n LEFT JOIN risc_notification_leases l ON l.notification_id = n.id
            WHERE n.status = '\(NotificationStatus.pending.rawValue)' AND n.subscriber_id = $1 AND n.next_attempt_at <= now()
              AND (l.until IS NULL OR l.until <= now())
              AND n.id <= (
                  SELECT head.id FROM risc_notifications head
                  WHERE head.status = '\(NotificationStatus.pending.rawValue)' AND head.subscriber_id = n.subscriber_id AND head.sub = n.sub
                  ORDER BY head.id LIMIT 1)
            ORDER BY n.next_attempt_at, n.id LIMIT $2
        ), leased AS (
            INSERT INTO risc_notification_leases AS l (notification_id, attempt, until)
            SELECT id, attempt, now() + make_interval(secs => $3) FROM due
            ON CONFLICT (notification_id) DO UPDATE SET attempt = EXCLUDED.attempt, until = EXCLUDED.until WHERE l.until <= now()
            RETURNING l.notification_id, l.attempt
        )
        SELECT n.id, n.webhook_id, n.kind, n.sub, n.count, n.event_id, n.event_jti, n.event_type, n.occurred_at,
               leased.attempt, s.id, s.url, s.secret, s.secret_sealed, s.secret_key_id,
               CASE WHEN s.previous_secret_until > now() THEN s.previous_secret_sealed END, s.previous_secret_key_id,
               n.traceparent, n.event_issued_at, n.transmitter, n.subject::text
        FROM leased JOIN risc_notifications n ON n.id = leased.notification_id JOIN risc_subscribers s ON s.id = n.subscriber_id
        """

    typealias Row = (
        Int64, String, String, String, Int32, Int64, String, String, Date, Int32, Int64, String, String?, Data?, String?, Data?,
        String?, String?, Date?, String?, String?
    )

    let subscriber: Int64
    let limit: Int
    let lease: Duration

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 3)
        bindings.append(subscriber)
        bindings.append(limit)
        bindings.append(Double(lease.components.seconds) + Double(lease.components.attoseconds) / 1e18)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
}

/// `record`'s statement, prepared once per connection and planned once, in general (`planSettings`; a test reads its
/// plan). The outcomes come as one JSON array: PostgreSQL estimates the rows of `jsonb_to_recordset` the same whatever
/// it holds, so it keeps one plan; the row count of an array parameter is part of the estimate, which made each
/// statement be planned again (about 0.5 ms of its CPU, each time).
/// Each table is reached only through `id = ANY(the ids)`, a lookup by its key. As a join, a plan made while
/// PostgreSQL expected no pending row (the usual state: every notification delivered when ANALYZE last looked) or an
/// empty outbox walked every pending row for each outcome, or every row; the connection kept that plan as a backlog
/// grew (a subscriber's outage), until the table's statistics were next updated (in a profile, 45 ms for a record of
/// about 40 outcomes, against 0.8 ms). For the same reason the status a row must still have is a parameter, not
/// written into the text: then no partial index of pending rows can stand in for the key. Each updated row takes its
/// outcome from a subquery that reads all of them, so a statement records at most `maximumOutcomes`.
struct RecordOutcomes: PostgresPreparedStatement {
    static let maximumOutcomes = 256
    static let parameterTypes = "text, text"
    static let sql = """
        WITH d AS (
            SELECT * FROM jsonb_to_recordset($1::jsonb) AS d(id bigint, attempt integer, status text, error text, delay float8)
        ), ended AS (
            DELETE FROM risc_notification_leases l USING d
            WHERE l.notification_id = ANY(ARRAY(SELECT id FROM d)) AND l.notification_id = d.id AND l.attempt = d.attempt
            RETURNING d.*
        ), done AS (
            -- One lease per notification, so one outcome per row.
            UPDATE risc_notifications n
            SET (status, attempts, last_attempt_at, last_error, delivered_at, next_attempt_at) = (
                SELECT ended.status, ended.attempt, now(), NULLIF(ended.error, ''),
                       CASE WHEN ended.status = '\(NotificationStatus.delivered.rawValue)' THEN now() END,
                       CASE WHEN ended.status = '\(NotificationStatus.pending.rawValue)'
                            THEN now() + make_interval(secs => ended.delay) ELSE n.next_attempt_at END
                FROM ended WHERE ended.id = n.id)
            WHERE n.id = ANY(ARRAY(SELECT id FROM ended)) AND n.status = $2
            RETURNING 1
        )
        SELECT count(*)::int8 FROM done
        """

    typealias Row = Int64

    /// `[{"id", "attempt", "status", "error", "delay"}]`.
    let outcomes: String

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 2)
        bindings.append(outcomes)
        bindings.append(NotificationStatus.pending.rawValue)
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Int64.self) }
}
