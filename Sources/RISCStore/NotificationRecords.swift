import Foundation
import RISC

// What the admin API answers and `--json` prints of subscribers and notifications. Never a secret:
// a subscriber's secret is shown once, when it is added.

/// One subscriber, with how many of its notifications wait and how many are dead.
public struct SubscriberRecord: Sendable, Equatable, Encodable {
    public var id: Int64
    /// The URL with any user-info and query string redacted (`URLPolicy.redacted`), as listings show it: never the URL
    /// as stored, which may carry a credential.
    public var url: String
    /// Nil: every notified kind.
    public var actions: [ActionKind]?
    /// From RISC_SUBSCRIBERS (kept in step with it), rather than added by an operator.
    public var configured: Bool
    public var createdAt: Date
    public var pending: Int
    public var dead: Int
    /// Why its deliveries are paused, or nil: its secret cannot be opened with the vault keys configured here. Its
    /// notifications wait, their attempts uncounted, until the right key is configured or the secret rotated.
    public var paused: String? = nil
}

/// Every subscriber, as the admin API and `subscribers list --json` show them.
public struct SubscriberList: Sendable, Equatable, Encodable {
    public var subscribers: [SubscriberRecord]

    public init(_ subscribers: [SubscriberRecord]) { self.subscribers = subscribers }
}

/// One notification and how its delivery stands.
public struct NotificationRecord: Sendable, Equatable, Encodable {
    public var id: Int64
    public var webhookID: String
    public var subscriberID: Int64
    /// What the subscriber is (or was) sent, exactly: `ActionNotification.body`.
    public var body: JSONValue
    public var actionID: Int64
    public var status: NotificationStatus
    public var attempts: Int
    /// When the next attempt may be made; nil unless pending.
    public var nextAttemptAt: Date?
    public var lastAttemptAt: Date?
    public var lastError: String?
    public var deliveredAt: Date?

    static let columns = """
        id, webhook_id, subscriber_id, kind, sub, count, event_id, event_jti, event_type, occurred_at, action_id, status, attempts,
        next_attempt_at, last_attempt_at, last_error, delivered_at, event_issued_at, transmitter, subject::text
        """
    typealias Row = (
        Int64, String, Int64, String, String, Int32, Int64, String, String, Date, Int64, NotificationStatus, Int32, Date, Date?,
        String?, Date?, Date?, String?, String?
    )

    init(row: Row) {
        let (
            id, webhookID, subscriberID, kind, sub, count, eventID, jti, eventType, occurredAt, actionID, status, attempts,
            nextAttemptAt, lastAttemptAt, lastError, deliveredAt, issuedAt, transmitter, subject
        ) = row
        (self.id, self.webhookID, self.subscriberID) = (id, webhookID, subscriberID)
        var notification = ActionNotification(
            kind: kind, sub: sub.isEmpty ? nil : sub, count: Int(count), eventID: eventID, jti: jti, eventType: eventType,
            issuedAt: issuedAt, occurredAt: occurredAt)
        notification.received(from: transmitter, subject: subject)
        body = notification.body
        (self.actionID, self.status, self.attempts) = (actionID, status, Int(attempts))
        self.nextAttemptAt = status == .pending ? nextAttemptAt : nil
        (self.lastAttemptAt, self.lastError, self.deliveredAt) = (lastAttemptAt, lastError, deliveredAt)
    }

    /// `subscriber` is the subscriber's id; the encoder writes the other names in snake_case.
    enum CodingKeys: String, CodingKey {
        case id, webhookID
        case subscriberID = "subscriber"
        case body, actionID, status, attempts, nextAttemptAt, lastAttemptAt
        case lastError, deliveredAt
    }
}

/// A page of notifications, newest first, and the cursor of the next page (nil on the last).
public struct NotificationPage: Sendable, Equatable, Encodable {
    public var notifications: [NotificationRecord]
    public var nextCursor: String?
}

extension ActionNotification {
    /// The stored transmitter and subject (`risc_notifications.transmitter`, `subject::text`) of a Shared Signals event.
    mutating func received(from transmitter: String?, subject: String?) {
        self.transmitter = transmitter
        self.subject = subject.flatMap { try? JSONValue.parse($0.utf8) }
    }
}
