import Foundation
import Logging
import PostgresNIO
import RISC

/// The one query layer behind the admin HTTP API and the admin CLI: both print the same JSON objects.
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
        public var status: EventStatus?
        /// A full event-type URI (a short name is resolved by `parse`).
        public var typeURI: String?
        public var sub: String?
        public var since: Date?
        public var until: Date?
        public var limit = 50
        public var cursor: String?

        public init() {}

        /// Builds a filter from text parameters (query string or command-line options).
        public static func parse(
            status: String?, type: String?, sub: String?, since: String?, until: String?, limit: String?, cursor: String?
        ) throws(InvalidParameter) -> EventFilter {
            var filter = EventFilter()
            if let status {
                guard let known = EventStatus(rawValue: status) else {
                    let names = EventStatus.allCases.map(\.rawValue).sorted().joined(separator: ", ")
                    throw InvalidParameter(name: "status", problem: "must be one of \(names)")
                }
                filter.status = known
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
            filter.limit = try parseLimit(limit)
            filter.cursor = try checkCursor(cursor)
            return filter
        }

        public static func timestamp(_ value: String, name: String) throws(InvalidParameter) -> Date {
            let formatter = ISO8601DateFormatter()
            if let date = formatter.date(from: value) { return date }
            formatter.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
            if let date = formatter.date(from: value) { return date }
            throw InvalidParameter(name: name, problem: "must be an RFC 3339 timestamp such as 2026-11-22T05:00:00Z")
        }
    }

    /// A page size: 1 to 500, 50 when not given.
    static func parseLimit(_ limit: String?) throws(InvalidParameter) -> Int {
        guard let limit else { return 50 }
        guard let value = Int(limit), (1...500).contains(value) else {
            throw InvalidParameter(name: "limit", problem: "must be a number from 1 to 500")
        }
        return value
    }

    /// A cursor this API issued, or nil.
    static func checkCursor(_ cursor: String?) throws(InvalidParameter) -> String? {
        guard let cursor else { return nil }
        guard decodeCursor(cursor) != nil else { throw InvalidParameter(name: "cursor", problem: "is not a cursor this API issued") }
        return cursor
    }

    let client: PostgresClient
    let logger: Logger
    /// Each call's bound (RISC_DATABASE_TIMEOUT), the same for the admin API and the CLI.
    let timeout: Duration
    /// The mode `stats` reports: this process's RISC_ENFORCE.
    let mode: EnforcementMode

    public init(client: PostgresClient, timeout: Duration = .seconds(5), mode: EnforcementMode = .enforce, logger: Logger) {
        self.client = client
        self.timeout = timeout
        self.mode = mode
        self.logger = logger
    }

    private func bounded<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await client.withConnection(timeout: timeout, body)
    }

    /// Pages run newest first by id. A cursor names the last id seen, so rows inserted meanwhile (with higher
    /// ids) never shift a page: the listing is stable under concurrent inserts.
    static func encodeCursor(_ id: Int64) -> String {
        Base64URL.encode(Array("e:\(id)".utf8))
    }

    static func decodeCursor(_ cursor: String) -> Int64? {
        guard let data = Base64URL.decode(cursor), let text = String(data: data, encoding: .utf8), text.hasPrefix("e:")
        else { return nil }
        return Int64(text.dropFirst(2))
    }

    public func events(_ filter: EventFilter) async throws -> EventPage {
        try await bounded { connection in
            let before = filter.cursor.flatMap(Self.decodeCursor)
            let rows = try await connection.query(
                """
                SELECT \(unescaped: EventSummary.columns)
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
            var page = EventPage(events: [])
            for try await row in rows.decode(EventSummary.Row.self) {
                if page.events.count == filter.limit {
                    page.nextCursor = Self.encodeCursor(page.events.last!.id)
                    break
                }
                page.events.append(EventSummary(row: row))
            }
            return page
        }
    }

    public func event(id: Int64) async throws -> EventDetail? {
        try await bounded { connection in
            let rows = try await connection.query(
                """
                SELECT \(unescaped: EventSummary.columns), issuer, issued_at, run_after, last_error, claims::text, events::text
                FROM risc_events WHERE id = \(id)
                """, logger: logger)
            var found: EventDetail?
            for try await (id, jti, types, sub, status, attempts, receivedAt, completedAt, shadow, issuer, issuedAt, runAfter, lastError, claims,
                events)
                in rows.decode(
                    (Int64, String, [String], String?, EventStatus, Int32, Date, Date?, Bool, String, Date, Date, String?, String, String).self)
            {
                let summary = EventSummary(row: (id, jti, types, sub, status, attempts, receivedAt, completedAt, shadow))
                found = EventDetail(
                    summary: summary, issuer: issuer, issuedAt: issuedAt, runAfter: EventStatus.waiting.contains(status) ? runAfter : nil,
                    lastError: lastError, claimsJSON: claims, decodedEvents: SecurityEvent.stored(events.utf8), actions: [])
            }
            guard var detail = found else { return nil }
            for try await (kind, sub, text, count, appliedAt, shadow) in try await connection.query(
                "SELECT kind, sub, detail, rows_affected, applied_at, shadow FROM risc_event_actions WHERE event_id = \(id) ORDER BY id",
                logger: logger
            ).decode((ActionKind, String?, String?, Int32, Date, Bool).self) {
                detail.actions.append(
                    RecordedAction(kind: kind, sub: sub, detail: text, rowsAffected: Int(count), appliedAt: appliedAt, shadow: shadow))
            }
            return detail
        }
    }

    /// Everything about one user. Nil when the service has never heard of the sub.
    public func user(sub: String) async throws -> UserReport? {
        try await bounded { connection in
            var report = UserReport(sub: sub, account: nil, flags: AccountFlags(), sessions: .init(), grants: .init(), recentEvents: [])
            for try await (email, emailVerified, name, hd, signInDisabled, disabledReason, signInStateAt, reviewRequired,
                           credentialChangeRequired, firstSeenAt, lastSignInAt) in try await connection.query(
                """
                SELECT email, email_verified, name, hd, sign_in_disabled, disabled_reason, sign_in_state_at, review_required,
                       credential_change_required, created_at, last_sign_in_at
                FROM risc_users WHERE sub = \(sub)
                """, logger: logger
            ).decode((String?, Bool?, String?, String?, Bool, String?, Date?, Bool, Bool, Date, Date?).self) {
                report.flags = AccountFlags(
                    signInDisabled: signInDisabled, reviewRequired: reviewRequired, credentialChangeRequired: credentialChangeRequired)
                report.account = .init(
                    email: email, emailVerified: emailVerified, name: name, hd: hd, disabledReason: disabledReason,
                    signInStateAt: signInStateAt, firstSeenAt: firstSeenAt, lastSignInAt: lastSignInAt)
            }
            for try await (active, revoked) in try await connection.query(
                """
                SELECT count(*) FILTER (WHERE revoked_at IS NULL AND expires_at > now())::int8,
                       count(*) FILTER (WHERE revoked_at IS NOT NULL)::int8
                FROM risc_sessions WHERE sub = \(sub)
                """, logger: logger
            ).decode((Int64, Int64).self) {
                report.sessions = .init(active: Int(active), revoked: Int(revoked))
            }
            for try await (active, revoked) in try await connection.query(
                """
                SELECT count(*) FILTER (WHERE revoked_at IS NULL)::int8, count(*) FILTER (WHERE revoked_at IS NOT NULL)::int8
                FROM risc_grants WHERE sub = \(sub)
                """, logger: logger
            ).decode((Int64, Int64).self) {
                report.grants = .init(active: Int(active), revoked: Int(revoked))
            }
            var filter = EventFilter()
            filter.sub = sub
            filter.limit = 20
            report.recentEvents = try await events(filter).events
            let nothing = UserReport.Counts()
            if report.account == nil, report.sessions == nothing, report.grants == nothing, report.recentEvents.isEmpty { return nil }
            return report
        }
    }

    public func stats() async throws -> QueueStats {
        // The backlog first, under the usual bound: a database that is down is reported as soon as by any other call.
        let backlog = try await backlog()
        let shadowEvents = try await bounded { connection in
            // Read from the partial index of shadow events: none at all in enforcing mode.
            var count: Int64 = 0
            for try await value in try await connection.query("SELECT count(*)::int8 FROM risc_events WHERE shadow", logger: logger)
                .decode(Int64.self)
            {
                count = value
            }
            return Int(count)
        }
        // Then every stored event is counted, twice: at ten million events that takes seconds, more than
        // RISC_DATABASE_TIMEOUT, so the counts have a bound of their own.
        return try await client.withConnection(timeout: max(timeout, Self.countTimeout)) { connection in
            var stats = QueueStats(byStatus: [:], byType: [:], backlog: backlog, mode: mode, shadowEvents: shadowEvents)
            for try await (status, count) in try await connection.query(
                "SELECT status, count(*)::int8 FROM risc_events GROUP BY status", logger: logger
            ).decode((EventStatus, Int64).self) {
                stats.byStatus[status] = Int(count)
            }
            for try await (type, count) in try await connection.query(
                "SELECT t, count(*)::int8 FROM risc_events, unnest(event_types) AS t GROUP BY t", logger: logger
            ).decode((String, Int64).self) {
                stats.byType[EventType(rawValue: type)?.shortName ?? type] = Int(count)
            }
            return stats
        }
    }

    /// The bound of `stats`'s counts of every stored event.
    public static let countTimeout: Duration = .seconds(60)

    /// How many events wait for a worker, and the age of the oldest: for `stats` and the metrics.
    public func backlog() async throws -> Backlog {
        try await bounded { connection in
            var backlog = Backlog()
            for try await (depth, age) in try await connection.query(
                """
                SELECT count(*)::int8, extract(epoch FROM now() - min(received_at))::float8
                FROM risc_events WHERE status = ANY(\(EventStatus.waiting))
                """, logger: logger
            ).decode((Int64, Double?).self) {
                backlog = Backlog(depth: Int(depth), oldestAgeSeconds: age)
            }
            return backlog
        }
    }

    /// The ids of every dead event, oldest first (for `events replay --dead`).
    public func deadEventIDs() async throws -> [Int64] {
        try await bounded { connection in
            var ids: [Int64] = []
            for try await id in try await connection.query(
                "SELECT id FROM risc_events WHERE status = \(EventStatus.dead) ORDER BY id", logger: logger
            ).decode(Int64.self) {
                ids.append(id)
            }
            return ids
        }
    }
}
