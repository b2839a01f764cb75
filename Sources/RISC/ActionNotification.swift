import Foundation

/// What a subscriber is told of one action: the body of a Standard Webhooks delivery. Built from the
/// stored notification on every attempt; the same row gives the same bytes (keys are serialized sorted).
/// Never a token, a secret or the SET: only the action, the user, the count and which event caused it.
public struct ActionNotification: Sendable, Equatable {
    /// The action's kind (`revoke_sessions`, ...), as the admin API names it.
    public var kind: String
    /// Nil when the action names no user (a token-revoked event names a token).
    public var sub: String?
    /// Rows the action changed; 0 is still notified, as the app's other stores may hold state for the user.
    public var count: Int
    public var eventID: Int64
    public var jti: String
    /// The event type URI of the SET that caused it.
    public var eventType: String
    /// The SET's `iat`, so a subscriber can order what it hears by when it happened; nil only for a notification
    /// written before the service recorded it, and delivered since.
    public var issuedAt: Date?
    public var occurredAt: Date
    /// For an event from a Shared Signals transmitter, its name and the event's subject as received (`sub` is then
    /// the user that subject named, or nil); nil for Google's.
    public var transmitter: String? = nil
    public var subject: JSONValue? = nil

    public init(
        kind: String, sub: String?, count: Int, eventID: Int64, jti: String, eventType: String, issuedAt: Date?, occurredAt: Date
    ) {
        self.kind = kind
        self.sub = sub
        self.count = count
        self.eventID = eventID
        self.jti = jti
        self.eventType = eventType
        self.issuedAt = issuedAt
        self.occurredAt = occurredAt
    }

    public var body: JSONValue {
        var event: [String: JSONValue] = ["id": .number(Double(eventID)), "jti": .string(jti), "type": .string(eventType)]
        if let issuedAt { event["issued_at"] = .timestamp(issuedAt) }
        var body: [String: JSONValue] = [
            "type": .string(kind), "sub": sub.map(JSONValue.string) ?? .null, "count": .number(Double(count)),
            "event": .object(event), "occurred_at": .timestamp(occurredAt),
        ]
        if let transmitter {
            body["transmitter"] = .string(transmitter)
            body["subject"] = subject ?? .null
        }
        return .object(body)
    }
}

/// Where a notification stands: waiting for a (next) attempt, delivered (a 2xx), or dead after the
/// last attempt, kept until replayed.
public enum NotificationStatus: String, Sendable, CaseIterable, Encodable {
    case pending
    case delivered
    case dead

    /// What an operator may send again: a dead letter, or a delivery the subscriber lost.
    public static let replayable: [NotificationStatus] = [.dead, .delivered]
}
