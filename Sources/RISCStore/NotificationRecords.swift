import Foundation
import RISC

// What the admin API answers and `--json` prints of subscribers and notifications. Never a secret:
// a subscriber's secret is shown once, when it is added.

/// One subscriber, with how many of its notifications wait and how many are dead.
public struct SubscriberRecord: Sendable, Equatable {
    public var id: Int64
    public var url: String
    /// Nil: every notified kind.
    public var actions: [ActionKind]?
    /// From RISC_SUBSCRIBERS (kept in step with it), rather than added by an operator.
    public var configured: Bool
    public var createdAt: Date
    public var pending: Int
    public var dead: Int

    public var jsonValue: JSONValue {
        [
            "id": .number(Double(id)), "url": .string(url), "actions": actions.json { .array($0.map { .string($0.rawValue) }) },
            "configured": .bool(configured), "created_at": .timestamp(createdAt), "pending": .number(Double(pending)), "dead": .number(Double(dead)),
        ]
    }
}

/// One notification and how its delivery stands.
public struct NotificationRecord: Sendable, Equatable {
    public var id: Int64
    public var webhookID: String
    public var subscriberID: Int64
    /// What the subscriber is (or was) sent.
    public var notification: ActionNotification
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
        next_attempt_at, last_attempt_at, last_error, delivered_at
        """
    typealias Row = (
        Int64, String, Int64, String, String, Int32, Int64, String, String, Date, Int64, NotificationStatus, Int32, Date, Date?,
        String?, Date?
    )

    init(row: Row) {
        let (id, webhookID, subscriberID, kind, sub, count, eventID, jti, eventType, occurredAt, actionID, status, attempts,
             nextAttemptAt, lastAttemptAt, lastError, deliveredAt) = row
        (self.id, self.webhookID, self.subscriberID) = (id, webhookID, subscriberID)
        notification = ActionNotification(
            kind: kind, sub: sub.isEmpty ? nil : sub, count: Int(count), eventID: eventID, jti: jti, eventType: eventType,
            occurredAt: occurredAt)
        (self.actionID, self.status, self.attempts) = (actionID, status, Int(attempts))
        self.nextAttemptAt = status == .pending ? nextAttemptAt : nil
        (self.lastAttemptAt, self.lastError, self.deliveredAt) = (lastAttemptAt, lastError, deliveredAt)
    }

    public var jsonValue: JSONValue {
        [
            "id": .number(Double(id)), "webhook_id": .string(webhookID), "subscriber": .number(Double(subscriberID)),
            "body": notification.body, "action_id": .number(Double(actionID)), "status": .string(status.rawValue),
            "attempts": .number(Double(attempts)), "next_attempt_at": nextAttemptAt.json(JSONValue.timestamp),
            "last_attempt_at": lastAttemptAt.json(JSONValue.timestamp), "last_error": lastError.json(JSONValue.string),
            "delivered_at": deliveredAt.json(JSONValue.timestamp),
        ]
    }
}

/// A page of notifications, newest first, and the cursor of the next page (nil on the last).
public struct NotificationPage: Sendable, Equatable {
    public var notifications: [NotificationRecord]
    public var nextCursor: String?

    public var jsonValue: JSONValue {
        ["notifications": .array(notifications.map(\.jsonValue)), "next_cursor": nextCursor.json(JSONValue.string)]
    }
}
