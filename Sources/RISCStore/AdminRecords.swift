import Foundation
import RISC

// What the admin API answers and `--json` prints, as named `Encodable` values. Both edges encode them with
// `JSONValueEncoder`, so an absent field is `null`, a time is RFC 3339 and a name is the property's in snake_case
// (`receivedAt` is `received_at`); the CLI's tables read the fields. Each record's stored properties are its JSON, one
// member each (synthesized `Encodable`): a field the JSON shows is computed once, when the record is made.

/// One row of an event listing.
public struct EventSummary: Sendable, Equatable, Encodable {
    public var id: Int64
    public var jti: String
    /// The SET's first event-type URI, the one that names it (`EventDetail` has them all).
    public var type: String
    /// The type's short name, or `unknown`.
    public var typeName: String
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
        (self.id, self.jti, self.sub, self.status) = (id, jti, sub, status)
        let type = types.first ?? ""
        (self.type, typeName) = (type, EventType(rawValue: type)?.shortName ?? "unknown")
        (self.attempts, self.receivedAt, self.completedAt, self.shadow) = (Int(attempts), receivedAt, completedAt, shadow)
    }
}

/// A page of events, newest first, and the cursor of the next page (nil on the last).
public struct EventPage: Sendable, Equatable, Encodable {
    public var events: [EventSummary]
    public var nextCursor: String?
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
}

/// What applying an event again would do now (`events explain`): each action, with the rows it would change.
public struct EventExplanation: Sendable, Equatable, Encodable {
    public struct Action: Sendable, Equatable, Encodable {
        public var kind: ActionKind
        public var sub: String?
        public var detail: String?
        public var rowsAffected: Int
    }

    public var id: Int64
    /// Whether a replay now would change these rows (`enforce`) or record them as shadow actions (`shadow`).
    public var mode: EnforcementMode
    public var actions: [Action]
}

/// RISC_ENFORCE, as the admin API and the CLI name it: it encodes as its raw value.
public enum EnforcementMode: String, Sendable, Equatable, Encodable {
    case enforce
    case shadow

    public init(enforce: Bool) { self = enforce ? .enforce : .shadow }
}

/// Two records written as one JSON object, the fields of both side by side (no name in both); each field reads as
/// the whole's own (`detail.id`, `detail.claims`).
@dynamicMemberLookup
public struct Merged<First: Encodable & Sendable & Equatable, Second: Encodable & Sendable & Equatable>: Sendable, Equatable, Encodable {
    public var first: First
    public var second: Second

    public func encode(to encoder: any Encoder) throws {
        try first.encode(to: encoder)
        try second.encode(to: encoder)
    }

    public subscript<T>(dynamicMember path: WritableKeyPath<First, T>) -> T {
        get { first[keyPath: path] }
        set { first[keyPath: path] = newValue }
    }

    public subscript<T>(dynamicMember path: WritableKeyPath<Second, T>) -> T {
        get { second[keyPath: path] }
        set { second[keyPath: path] = newValue }
    }
}

/// One event in full: `EventSummary`'s fields, and beside them the rest (`EventParticulars`).
public typealias EventDetail = Merged<EventSummary, EventParticulars>

/// What an event's detail shows beyond its summary: every type, the claims as signed (never the signature), the
/// decoded events, and its actions.
public struct EventParticulars: Sendable, Equatable, Encodable {
    /// Every event-type URI of the SET, in order.
    public var types: [String]
    public var issuer: String
    public var issuedAt: Date
    /// When a worker may claim it next; nil unless it is waiting.
    public var runAfter: Date?
    public var lastError: String?
    /// The payload exactly as received, `.verbatim`: a number or escape is never rewritten.
    public var claims: JSONValue
    /// The stored events as the model reads them; nil if they cannot be read (they always can: the inbox writes them
    /// from the same model).
    public var decodedEvents: [JSONValue]?
    public var actions: [RecordedAction]

    /// `claims` is the payload's text, `events` the stored events.
    init(
        types: [String], issuer: String, issuedAt: Date, runAfter: Date?, lastError: String?, claims: String, events: [SecurityEvent]?,
        actions: [RecordedAction]
    ) {
        (self.types, self.issuer, self.issuedAt, self.runAfter, self.lastError) = (types, issuer, issuedAt, runAfter, lastError)
        self.claims = .verbatim(claims)
        decodedEvents = events.map { $0.map(\.jsonValue) }
        self.actions = actions
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
        /// The one flag shown beside the account's columns too (an account-disabled event sets it).
        public var signInDisabled: Bool
        public var disabledReason: String?
        public var signInStateAt: Date?
        public var firstSeenAt: Date
        public var lastSignInAt: Date?
    }

    public struct Counts: Sendable, Equatable, Encodable {
        public var active = 0
        public var revoked = 0
    }

    public var sub: String
    public var account: Account?
    /// The flags set, by name (`AccountFlags.names`).
    public var flags: [String]
    public var sessions: Counts
    public var grants: Counts
    public var recentEvents: [EventSummary]
}

/// Events waiting for a worker (`EventStatus.waiting`), and how long the oldest has waited.
public struct Backlog: Sendable, Equatable {
    public var depth = 0
    /// Nil when nothing waits.
    public var oldestAgeSeconds: Double?
}

/// Counts by status and type, and the backlog.
public struct QueueStats: Sendable, Equatable, Encodable {
    /// Every status, a status with no events as 0.
    public var byStatus: [EventStatus: Int]
    /// By short name, or by URI for unknown types.
    public var byType: [String: Int]
    /// The backlog's depth: events waiting for a worker (`EventStatus.waiting`).
    public var queueDepth: Int
    /// How long the oldest waiting event has waited; nil when nothing waits.
    public var oldestPendingAgeSeconds: Double?
    /// Dead letters: the `dead` count of `byStatus`.
    public var dead: Int
    /// The mode of the process answering (RISC_ENFORCE).
    public var mode: EnforcementMode
    /// Events whose actions were last decided in shadow mode: what `events replay --since` would apply.
    public var shadowEvents: Int

    /// `byStatus` need not name every status: one it leaves out has no events.
    init(byStatus: [EventStatus: Int], byType: [String: Int], backlog: Backlog, mode: EnforcementMode, shadowEvents: Int) {
        self.byStatus = Dictionary(uniqueKeysWithValues: EventStatus.allCases.map { ($0, byStatus[$0] ?? 0) })
        self.byType = byType
        (queueDepth, oldestPendingAgeSeconds) = (backlog.depth, backlog.oldestAgeSeconds)
        dead = self.byStatus[.dead] ?? 0
        (self.mode, self.shadowEvents) = (mode, shadowEvents)
    }
}
