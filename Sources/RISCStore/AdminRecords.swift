import Foundation
import RISC

// What the admin API answers and `--json` prints, as named `Encodable` values. Both edges encode them with
// `JSONValueEncoder`, so an absent field is `null` and a time is RFC 3339; the CLI's tables read the fields.

/// One row of an event listing.
public struct EventSummary: Sendable, Equatable, Encodable {
    public var id: Int64
    public var jti: String
    /// Every event-type URI of the SET, in order; the first names it.
    public var types: [String]
    public var sub: String?
    public var status: EventStatus
    public var attempts: Int
    public var receivedAt: Date
    public var completedAt: Date?
    /// Its actions were last decided in shadow mode and changed nothing: `events replay` applies them.
    public var shadow: Bool

    /// The columns `init(row:)` takes, in order.
    static let columns = "id, jti, event_types, subject_sub, status, attempts, received_at, completed_at, shadow"
    typealias Row = (Int64, String, [String], String?, EventStatus, Int32, Date, Date?, Bool)

    init(row: Row) {
        let (id, jti, types, sub, status, attempts, receivedAt, completedAt, shadow) = row
        (self.id, self.jti, self.types, self.sub, self.status) = (id, jti, types, sub, status)
        (self.attempts, self.receivedAt, self.completedAt, self.shadow) = (Int(attempts), receivedAt, completedAt, shadow)
    }

    public var type: String { types.first ?? "" }
    /// The type's short name, or `unknown`.
    public var typeName: String { EventType(rawValue: type)?.shortName ?? "unknown" }

    enum CodingKeys: String, CodingKey {
        case id, jti, type, typeName = "type_name", sub, status, attempts, receivedAt = "received_at", completedAt = "completed_at"
        case shadow
    }

    /// The first type and its short name; `EventDetail` adds every type.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(jti, forKey: .jti)
        try container.encode(type, forKey: .type)
        try container.encode(typeName, forKey: .typeName)
        try container.encode(sub, forKey: .sub)
        try container.encode(status.rawValue, forKey: .status)
        try container.encode(attempts, forKey: .attempts)
        try container.encode(receivedAt, forKey: .receivedAt)
        try container.encode(completedAt, forKey: .completedAt)
        try container.encode(shadow, forKey: .shadow)
    }
}

/// A page of events, newest first, and the cursor of the next page (nil on the last).
public struct EventPage: Sendable, Equatable, Encodable {
    public var events: [EventSummary]
    public var nextCursor: String?

    enum CodingKeys: String, CodingKey { case events, nextCursor = "next_cursor" }
}

/// One action an event took, as `risc_apply_actions` recorded it.
public struct RecordedAction: Sendable, Equatable, Encodable {
    public var kind: ActionKind
    public var sub: String?
    public var detail: String?
    public var rowsAffected: Int
    public var appliedAt: Date
    /// Recorded in shadow mode: `rowsAffected` rows would have changed, and none did.
    public var shadow: Bool

    enum CodingKeys: String, CodingKey { case kind, sub, detail, rowsAffected = "rows_affected", appliedAt = "applied_at", shadow }

    // The vocabulary enums stay out of `Encodable`: postgres-nio would then bind them as jsonb.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(kind.rawValue, forKey: .kind)
        try container.encode(sub, forKey: .sub)
        try container.encode(detail, forKey: .detail)
        try container.encode(rowsAffected, forKey: .rowsAffected)
        try container.encode(appliedAt, forKey: .appliedAt)
        try container.encode(shadow, forKey: .shadow)
    }
}

/// What applying an event again would do now (`events explain`): each action, with the rows it would change.
public struct EventExplanation: Sendable, Equatable, Encodable {
    public struct Action: Sendable, Equatable, Encodable {
        public var kind: ActionKind
        public var sub: String?
        public var detail: String?
        public var rowsAffected: Int

        enum CodingKeys: String, CodingKey { case kind, sub, detail, rowsAffected = "rows_affected" }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(kind.rawValue, forKey: .kind)
            try container.encode(sub, forKey: .sub)
            try container.encode(detail, forKey: .detail)
            try container.encode(rowsAffected, forKey: .rowsAffected)
        }
    }

    public var id: Int64
    /// Whether a replay now would change these rows (`enforce`) or record them as shadow actions (`shadow`).
    public var mode: EnforcementMode
    public var actions: [Action]

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(mode.rawValue, forKey: .mode)
        try container.encode(actions, forKey: .actions)
    }

    enum CodingKeys: String, CodingKey { case id, mode, actions }
}

/// RISC_ENFORCE, as the admin API and the CLI name it.
public enum EnforcementMode: String, Sendable, Equatable {
    case enforce
    case shadow

    public init(enforce: Bool) { self = enforce ? .enforce : .shadow }
}

/// One event in full: the claims as signed (never the signature), the decoded events, and its actions.
public struct EventDetail: Sendable, Equatable, Encodable {
    public var summary: EventSummary
    public var issuer: String
    public var issuedAt: Date
    /// When a worker may claim it next; nil unless it is waiting.
    public var runAfter: Date?
    public var lastError: String?
    /// The payload exactly as received: a number or escape is never rewritten.
    public var claimsJSON: String
    /// Nil if the stored events cannot be read (they always can: the inbox writes them from the same model).
    public var decodedEvents: [SecurityEvent]?
    public var actions: [RecordedAction]

    enum CodingKeys: String, CodingKey {
        case types, issuer, issuedAt = "issued_at", runAfter = "run_after", lastError = "last_error", claims
        case decodedEvents = "decoded_events", actions
    }

    /// The summary's fields, and beside them the rest.
    public func encode(to encoder: any Encoder) throws {
        try summary.encode(to: encoder)
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(summary.types, forKey: .types)
        try container.encode(issuer, forKey: .issuer)
        try container.encode(issuedAt, forKey: .issuedAt)
        try container.encode(runAfter, forKey: .runAfter)
        try container.encode(lastError, forKey: .lastError)
        try container.encode(JSONValue.verbatim(claimsJSON), forKey: .claims)
        try container.encode(decodedEvents.map { $0.map(\.jsonValue) }, forKey: .decodedEvents)
        try container.encode(actions, forKey: .actions)
    }
}

/// Everything about one user: account state, flags, session and grant counts, recent events.
public struct UserReport: Sendable, Equatable, Encodable {
    /// What `risc_users` holds; nil for a user who never signed in and was never named by an event's action.
    public struct Account: Sendable, Equatable, Encodable {
        public var email: String?
        public var emailVerified: Bool?
        public var name: String?
        public var hd: String?
        public var disabledReason: String?
        public var signInStateAt: Date?
        public var firstSeenAt: Date
        public var lastSignInAt: Date?

        enum CodingKeys: String, CodingKey {
            case email, emailVerified = "email_verified", name, hd, disabledReason = "disabled_reason"
            case signInStateAt = "sign_in_state_at", firstSeenAt = "first_seen_at", lastSignInAt = "last_sign_in_at"
        }
    }

    public struct Counts: Sendable, Equatable, Encodable {
        public var active = 0
        public var revoked = 0
    }

    public var sub: String
    public var account: Account?
    public var flags: AccountFlags
    public var sessions: Counts
    public var grants: Counts
    public var recentEvents: [EventSummary]

    enum CodingKeys: String, CodingKey { case sub, account, flags, sessions, grants, recentEvents = "recent_events" }
    enum AccountKeys: String, CodingKey { case signInDisabled = "sign_in_disabled" }

    /// The account carries `sign_in_disabled` beside its columns; `flags` lists the flags by name.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(sub, forKey: .sub)
        if let account {
            try account.encode(to: container.superEncoder(forKey: .account))
            var extra = container.nestedContainer(keyedBy: AccountKeys.self, forKey: .account)
            try extra.encode(flags.signInDisabled, forKey: .signInDisabled)
        } else {
            try container.encodeNil(forKey: .account)
        }
        try container.encode(flags.names, forKey: .flags)
        try container.encode(sessions, forKey: .sessions)
        try container.encode(grants, forKey: .grants)
        try container.encode(recentEvents, forKey: .recentEvents)
    }
}

/// Events waiting for a worker (`EventStatus.waiting`), and how long the oldest has waited.
public struct Backlog: Sendable, Equatable {
    public var depth = 0
    /// Nil when nothing waits.
    public var oldestAgeSeconds: Double?
}

/// Counts by status and type, and the backlog.
public struct QueueStats: Sendable, Equatable, Encodable {
    public var byStatus: [EventStatus: Int]
    /// By short name, or by URI for unknown types.
    public var byType: [String: Int]
    public var backlog: Backlog
    /// The mode of the process answering (RISC_ENFORCE).
    public var mode = EnforcementMode.enforce
    /// Events whose actions were last decided in shadow mode: what `events replay --since` would apply.
    public var shadowEvents = 0

    public var dead: Int { byStatus[.dead] ?? 0 }

    enum CodingKeys: String, CodingKey {
        case byStatus = "by_status", byType = "by_type", queueDepth = "queue_depth"
        case oldestPendingAgeSeconds = "oldest_pending_age_seconds", dead, mode, shadowEvents = "shadow_events"
    }

    /// Every status is listed, a status with no events as 0.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(Dictionary(uniqueKeysWithValues: EventStatus.allCases.map { ($0.rawValue, byStatus[$0] ?? 0) }), forKey: .byStatus)
        try container.encode(byType, forKey: .byType)
        try container.encode(backlog.depth, forKey: .queueDepth)
        try container.encode(backlog.oldestAgeSeconds, forKey: .oldestPendingAgeSeconds)
        try container.encode(dead, forKey: .dead)
        try container.encode(mode.rawValue, forKey: .mode)
        try container.encode(shadowEvents, forKey: .shadowEvents)
    }
}
