import Foundation
import Logging
import PostgresNIO
import RISC

/// The one query layer behind the admin HTTP API and the admin CLI (SPEC §6): both print the same JSON objects.
public struct AdminQueries: Sendable {
    /// A request parameter that cannot be used, named so the caller can say which.
    public struct InvalidParameter: Error, Sendable, CustomStringConvertible {
        public let name: String
        public let problem: String
        public var description: String { "\(name): \(problem)" }

        public init(name: String, problem: String) {
            self.name = name
            self.problem = problem
        }
    }

    public struct EventFilter: Sendable {
        public var status: String?
        /// A full event-type URI (a short name is resolved by `parse`).
        public var typeURI: String?
        public var sub: String?
        public var since: Date?
        public var until: Date?
        public var limit = 50
        public var cursor: String?

        public init() {}

        public static let statuses: Set<String> = ["pending", "retry", "done", "ignored", "dead"]

        /// Builds a filter from text parameters (query string or command-line options).
        public static func parse(
            status: String?, type: String?, sub: String?, since: String?, until: String?, limit: String?, cursor: String?
        ) throws(InvalidParameter) -> EventFilter {
            var filter = EventFilter()
            if let status {
                guard statuses.contains(status) else {
                    throw InvalidParameter(name: "status", problem: "must be one of \(statuses.sorted().joined(separator: ", "))")
                }
                filter.status = status
            }
            if let type {
                if let known = EventType(uriOrShortName: type) {
                    filter.typeURI = known.rawValue
                } else if type.hasPrefix("https://") {
                    filter.typeURI = type
                } else {
                    throw InvalidParameter(name: "type", problem: "must be an event-type URI or a short name such as sessions-revoked")
                }
            }
            filter.sub = sub
            filter.since = try since.map { value throws(InvalidParameter) in try timestamp(value, name: "since") }
            filter.until = try until.map { value throws(InvalidParameter) in try timestamp(value, name: "until") }
            if let limit {
                guard let value = Int(limit), (1...500).contains(value) else {
                    throw InvalidParameter(name: "limit", problem: "must be a number from 1 to 500")
                }
                filter.limit = value
            }
            if let cursor {
                guard decodeCursor(cursor) != nil else { throw InvalidParameter(name: "cursor", problem: "is not a cursor this API issued") }
                filter.cursor = cursor
            }
            return filter
        }

        static func timestamp(_ value: String, name: String) throws(InvalidParameter) -> Date {
            let formatter = ISO8601DateFormatter()
            if let date = formatter.date(from: value) { return date }
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            if let date = formatter.date(from: value) { return date }
            throw InvalidParameter(name: name, problem: "must be an RFC 3339 timestamp such as 2026-11-22T05:00:00Z")
        }
    }

    let client: PostgresClient
    let logger: Logger

    public init(client: PostgresClient, logger: Logger) {
        self.client = client
        self.logger = logger
    }

    /// Pages run newest first by id. A cursor names the last id seen, so rows inserted meanwhile (with higher
    /// ids) never shift a page: the listing is stable under concurrent inserts.
    static func encodeCursor(_ id: Int64) -> String {
        Data("e:\(id)".utf8).base64EncodedString().replacingOccurrences(of: "=", with: "")
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
    }

    static func decodeCursor(_ cursor: String) -> Int64? {
        guard let data = Base64Lenient.decode(cursor), let text = String(data: data, encoding: .utf8), text.hasPrefix("e:")
        else { return nil }
        return Int64(text.dropFirst(2))
    }

    /// `{"events": [...], "next_cursor": ... | null}`
    public func events(_ filter: EventFilter) async throws -> JSONValue {
        let before = filter.cursor.flatMap(Self.decodeCursor)
        let rows = try await client.query(
            """
            SELECT id, jti, event_types, subject_sub, status, attempts, received_at, completed_at
            FROM risc_events
            WHERE (\(filter.status)::text IS NULL OR status = \(filter.status))
              AND (\(filter.typeURI)::text IS NULL OR \(filter.typeURI) = ANY (event_types))
              AND (\(filter.sub)::text IS NULL OR subject_sub = \(filter.sub))
              AND (\(filter.since)::timestamptz IS NULL OR received_at >= \(filter.since))
              AND (\(filter.until)::timestamptz IS NULL OR received_at < \(filter.until))
              AND (\(before)::int8 IS NULL OR id < \(before))
            ORDER BY id DESC
            LIMIT \(filter.limit + 1)
            """, logger: logger)
        var events: [JSONValue] = []
        var lastID: Int64?
        var more = false
        for try await row in rows.decode((Int64, String, [String], String?, String, Int32, Date, Date?).self) {
            if events.count == filter.limit {
                more = true
                break
            }
            events.append(Self.summary(row))
            lastID = row.0
        }
        return ["events": .array(events), "next_cursor": more ? .string(Self.encodeCursor(lastID!)) : .null]
    }

    static func summary(_ row: (Int64, String, [String], String?, String, Int32, Date, Date?)) -> JSONValue {
        let (id, jti, types, sub, status, attempts, receivedAt, completedAt) = row
        let type = types.first ?? ""
        return [
            "id": .number(Double(id)), "jti": .string(jti), "type": .string(type),
            "type_name": .string(EventType(rawValue: type)?.shortName ?? "unknown"), "sub": sub.map(JSONValue.string) ?? .null,
            "status": .string(status), "attempts": .number(Double(attempts)), "received_at": .timestamp(receivedAt),
            "completed_at": completedAt.map(JSONValue.timestamp) ?? .null,
        ]
    }

    /// One event in full: the claims as signed (never the signature), the decoded events, and its actions.
    public func event(id: Int64) async throws -> JSONValue? {
        let rows = try await client.query(
            """
            SELECT id, jti, event_types, subject_sub, status, attempts, received_at, completed_at,
                   issuer, issued_at, run_after, last_error, claims::text, events::text
            FROM risc_events WHERE id = \(id)
            """, logger: logger)
        var found: JSONValue?
        for try await row in rows.decode(
            (Int64, String, [String], String?, String, Int32, Date, Date?, String, Date, Date, String?, String, String).self)
        {
            guard case .object(var object) = Self.summary((row.0, row.1, row.2, row.3, row.4, row.5, row.6, row.7)) else { continue }
            object["types"] = .array(row.2.map(JSONValue.string))
            object["issuer"] = .string(row.8)
            object["issued_at"] = .timestamp(row.9)
            object["run_after"] = ["pending", "retry"].contains(row.4) ? .timestamp(row.10) : .null
            object["last_error"] = row.11.map(JSONValue.string) ?? .null
            // Exactly as received (a `json` column keeps the text): a number or escape is never rewritten.
            object["claims"] = .verbatim(row.12)
            object["decoded_events"] = (try? JSONValue.parse(Data(row.13.utf8))) ?? .null
            found = .object(object)
        }
        guard case .object(var object) = found else { return nil }
        var actions: [JSONValue] = []
        for try await (kind, sub, detail, count, appliedAt) in try await client.query(
            "SELECT kind, sub, detail, rows_affected, applied_at FROM risc_event_actions WHERE event_id = \(id) ORDER BY id",
            logger: logger
        ).decode((String, String?, String?, Int32, Date).self) {
            actions.append([
                "kind": .string(kind), "sub": sub.map(JSONValue.string) ?? .null, "detail": detail.map(JSONValue.string) ?? .null,
                "rows_affected": .number(Double(count)), "applied_at": .timestamp(appliedAt),
            ])
        }
        object["actions"] = .array(actions)
        return .object(object)
    }

    /// Everything about one user: account state, flags, sessions and grants, and recent events. Nil when
    /// the service has never heard of the sub.
    public func user(sub: String) async throws -> JSONValue? {
        var account: JSONValue?
        var flags = AccountFlags()
        for try await row in try await client.query(
            """
            SELECT email, email_verified, name, hd, sign_in_disabled, disabled_reason, sign_in_state_at, review_required,
                   credential_change_required, created_at, last_sign_in_at
            FROM risc_users WHERE sub = \(sub)
            """, logger: logger
        ).decode((String?, Bool?, String?, String?, Bool, String?, Date?, Bool, Bool, Date, Date?).self) {
            flags = AccountFlags(signInDisabled: row.4, reviewRequired: row.7, credentialChangeRequired: row.8)
            account = [
                "email": row.0.map(JSONValue.string) ?? .null, "email_verified": row.1.map(JSONValue.bool) ?? .null,
                "name": row.2.map(JSONValue.string) ?? .null, "hd": row.3.map(JSONValue.string) ?? .null,
                "sign_in_disabled": .bool(row.4), "disabled_reason": row.5.map(JSONValue.string) ?? .null,
                "sign_in_state_at": row.6.map(JSONValue.timestamp) ?? .null, "first_seen_at": .timestamp(row.9),
                "last_sign_in_at": row.10.map(JSONValue.timestamp) ?? .null,
            ]
        }
        var sessions: JSONValue = ["active": 0, "revoked": 0]
        for try await (active, revoked) in try await client.query(
            """
            SELECT count(*) FILTER (WHERE revoked_at IS NULL AND expires_at > now())::int8,
                   count(*) FILTER (WHERE revoked_at IS NOT NULL)::int8
            FROM risc_sessions WHERE sub = \(sub)
            """, logger: logger
        ).decode((Int64, Int64).self) {
            sessions = ["active": .number(Double(active)), "revoked": .number(Double(revoked))]
        }
        var grants: JSONValue = ["active": 0, "revoked": 0]
        for try await (active, revoked) in try await client.query(
            """
            SELECT count(*) FILTER (WHERE revoked_at IS NULL)::int8, count(*) FILTER (WHERE revoked_at IS NOT NULL)::int8
            FROM risc_grants WHERE sub = \(sub)
            """, logger: logger
        ).decode((Int64, Int64).self) {
            grants = ["active": .number(Double(active)), "revoked": .number(Double(revoked))]
        }
        var filter = EventFilter()
        filter.sub = sub
        filter.limit = 20
        let recent = try await events(filter)["events"] ?? []
        if account == nil, sessions == ["active": 0, "revoked": 0], grants == ["active": 0, "revoked": 0], recent == [] {
            return nil
        }
        return [
            "sub": .string(sub), "account": account ?? .null, "flags": .array(flags.names.map(JSONValue.string)),
            "sessions": sessions, "grants": grants, "recent_events": recent,
        ]
    }

    public func stats() async throws -> JSONValue {
        var byStatus: [String: JSONValue] = Dictionary(uniqueKeysWithValues: EventFilter.statuses.map { ($0, JSONValue.number(0)) })
        for try await (status, count) in try await client.query(
            "SELECT status, count(*)::int8 FROM risc_events GROUP BY status", logger: logger
        ).decode((String, Int64).self) {
            byStatus[status] = .number(Double(count))
        }
        var byType: [String: JSONValue] = [:]
        for try await (type, count) in try await client.query(
            "SELECT t, count(*)::int8 FROM risc_events, unnest(event_types) AS t GROUP BY t", logger: logger
        ).decode((String, Int64).self) {
            byType[EventType(rawValue: type)?.shortName ?? type] = .number(Double(count))
        }
        var depth: Int64 = 0
        var oldest: Double?
        for try await (count, age) in try await client.query(
            """
            SELECT count(*)::int8, extract(epoch FROM now() - min(received_at))::float8
            FROM risc_events WHERE status IN ('pending', 'retry')
            """, logger: logger
        ).decode((Int64, Double?).self) {
            depth = count
            oldest = age
        }
        return [
            "by_status": .object(byStatus), "by_type": .object(byType), "queue_depth": .number(Double(depth)),
            "oldest_pending_age_seconds": oldest.map(JSONValue.number) ?? .null, "dead": byStatus["dead"] ?? 0,
        ]
    }

    /// The ids of every dead event, oldest first (for `events replay --dead`).
    public func deadEventIDs() async throws -> [Int64] {
        var ids: [Int64] = []
        for try await id in try await client.query("SELECT id FROM risc_events WHERE status = 'dead' ORDER BY id", logger: logger)
            .decode(Int64.self)
        {
            ids.append(id)
        }
        return ids
    }
}
