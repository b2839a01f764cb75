import Foundation
import RISC

// What the admin API answers and `--json` prints, as named values. Each has one JSON form,
// `jsonValue`, which the HTTP edge and the CLI serialize; the CLI's tables read the fields.

extension Optional {
    func json(_ transform: (Wrapped) -> JSONValue) -> JSONValue { map(transform) ?? .null }
}

/// One row of an event listing.
public struct EventSummary: Sendable, Equatable {
    public var id: Int64
    public var jti: String
    /// Every event-type URI of the SET, in order; the first names it.
    public var types: [String]
    public var sub: String?
    public var status: EventStatus
    public var attempts: Int
    public var receivedAt: Date
    public var completedAt: Date?

    /// The columns `init(row:)` takes, in order.
    static let columns = "id, jti, event_types, subject_sub, status, attempts, received_at, completed_at"
    typealias Row = (Int64, String, [String], String?, EventStatus, Int32, Date, Date?)

    init(row: Row) {
        let (id, jti, types, sub, status, attempts, receivedAt, completedAt) = row
        (self.id, self.jti, self.types, self.sub, self.status) = (id, jti, types, sub, status)
        (self.attempts, self.receivedAt, self.completedAt) = (Int(attempts), receivedAt, completedAt)
    }

    public var type: String { types.first ?? "" }
    /// The type's short name, or `unknown`.
    public var typeName: String { EventType(rawValue: type)?.shortName ?? "unknown" }

    public var jsonValue: JSONValue {
        [
            "id": .number(Double(id)), "jti": .string(jti), "type": .string(type), "type_name": .string(typeName),
            "sub": sub.json(JSONValue.string), "status": .string(status.rawValue), "attempts": .number(Double(attempts)),
            "received_at": .timestamp(receivedAt), "completed_at": completedAt.json(JSONValue.timestamp),
        ]
    }
}

/// A page of events, newest first, and the cursor of the next page (nil on the last).
public struct EventPage: Sendable, Equatable {
    public var events: [EventSummary]
    public var nextCursor: String?

    public var jsonValue: JSONValue {
        ["events": .array(events.map(\.jsonValue)), "next_cursor": nextCursor.json(JSONValue.string)]
    }
}

/// One action an event took, as `risc_apply_actions` recorded it.
public struct RecordedAction: Sendable, Equatable {
    public var kind: ActionKind
    public var sub: String?
    public var detail: String?
    public var rowsAffected: Int
    public var appliedAt: Date

    public var jsonValue: JSONValue {
        [
            "kind": .string(kind.rawValue), "sub": sub.json(JSONValue.string), "detail": detail.json(JSONValue.string),
            "rows_affected": .number(Double(rowsAffected)), "applied_at": .timestamp(appliedAt),
        ]
    }
}

/// One event in full: the claims as signed (never the signature), the decoded events, and its actions.
public struct EventDetail: Sendable, Equatable {
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

    public var jsonValue: JSONValue {
        guard case .object(var object) = summary.jsonValue else { return .null }
        object["types"] = .array(summary.types.map(JSONValue.string))
        object["issuer"] = .string(issuer)
        object["issued_at"] = .timestamp(issuedAt)
        object["run_after"] = runAfter.json(JSONValue.timestamp)
        object["last_error"] = lastError.json(JSONValue.string)
        object["claims"] = .verbatim(claimsJSON)
        object["decoded_events"] = decodedEvents.json { .array($0.map(\.jsonValue)) }
        object["actions"] = .array(actions.map(\.jsonValue))
        return .object(object)
    }
}

/// Everything about one user: account state, flags, session and grant counts, recent events.
public struct UserReport: Sendable, Equatable {
    /// What `risc_users` holds; nil for a user who never signed in and was never named by an event's action.
    public struct Account: Sendable, Equatable {
        public var email: String?
        public var emailVerified: Bool?
        public var name: String?
        public var hd: String?
        public var disabledReason: String?
        public var signInStateAt: Date?
        public var firstSeenAt: Date
        public var lastSignInAt: Date?

        public var jsonValue: JSONValue {
            [
                "email": email.json(JSONValue.string), "email_verified": emailVerified.json(JSONValue.bool),
                "name": name.json(JSONValue.string), "hd": hd.json(JSONValue.string),
                "disabled_reason": disabledReason.json(JSONValue.string),
                "sign_in_state_at": signInStateAt.json(JSONValue.timestamp), "first_seen_at": .timestamp(firstSeenAt),
                "last_sign_in_at": lastSignInAt.json(JSONValue.timestamp),
            ]
        }
    }

    public struct Counts: Sendable, Equatable {
        public var active = 0
        public var revoked = 0
        public var jsonValue: JSONValue { ["active": .number(Double(active)), "revoked": .number(Double(revoked))] }
    }

    public var sub: String
    public var account: Account?
    public var flags: AccountFlags
    public var sessions: Counts
    public var grants: Counts
    public var recentEvents: [EventSummary]

    public var jsonValue: JSONValue {
        var account = account?.jsonValue ?? .null
        if case .object(var object) = account {
            object["sign_in_disabled"] = .bool(flags.signInDisabled)
            account = .object(object)
        }
        return [
            "sub": .string(sub), "account": account, "flags": .array(flags.names.map(JSONValue.string)),
            "sessions": sessions.jsonValue, "grants": grants.jsonValue, "recent_events": .array(recentEvents.map(\.jsonValue)),
        ]
    }
}

/// Events waiting for a worker (`EventStatus.waiting`), and how long the oldest has waited.
public struct Backlog: Sendable, Equatable {
    public var depth = 0
    /// Nil when nothing waits.
    public var oldestAgeSeconds: Double?
}

/// Counts by status and type, and the backlog.
public struct QueueStats: Sendable, Equatable {
    public var byStatus: [EventStatus: Int]
    /// By short name, or by URI for unknown types.
    public var byType: [String: Int]
    public var backlog: Backlog

    public var dead: Int { byStatus[.dead] ?? 0 }

    public var jsonValue: JSONValue {
        [
            "by_status": .object(Dictionary(uniqueKeysWithValues: EventStatus.allCases.map { ($0.rawValue, .number(Double(byStatus[$0] ?? 0))) })),
            "by_type": .object(byType.mapValues { .number(Double($0)) }), "queue_depth": .number(Double(backlog.depth)),
            "oldest_pending_age_seconds": backlog.oldestAgeSeconds.json(JSONValue.number), "dead": .number(Double(dead)),
        ]
    }
}
