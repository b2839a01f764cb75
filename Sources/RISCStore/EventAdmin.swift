import Foundation
import Logging
import PostgresNIO
import RISC

/// The operator's side of stored events, for the admin API and the CLI: list and show them, explain what applying
/// one would do now, and make them runnable again (one, the dead ones, or the shadow ones since a time). The
/// worker's side, claiming and applying, is `EventQueue`.
public struct EventAdmin: BoundedStore {
    let client: PostgresClient
    let logger: Logger
    /// Each call's bound (RISC_DATABASE_TIMEOUT), the same for the admin API and the CLI.
    let timeout: Duration
    /// This process's RISC_ENFORCE: the mode `explain` judges in.
    let enforce: Bool

    public init(client: PostgresClient, timeout: Duration = .seconds(5), enforce: Bool = true, logger: Logger) {
        (self.client, self.timeout, self.enforce, self.logger) = (client, timeout, enforce, logger)
    }

    public struct Filter: Sendable {
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
        ) throws(InvalidParameter) -> Filter {
            var filter = Filter()
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
            filter.limit = try AdminPaging.parseLimit(limit)
            filter.cursor = try AdminPaging.checkCursor(cursor)
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

    public func events(_ filter: Filter) async throws -> EventPage {
        try await bounded { connection in
            let before = filter.cursor.flatMap(AdminPaging.decodeCursor)
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
            let page = try await AdminPaging.page(rows.decode(EventSummary.Row.self).map(EventSummary.init(row:)), limit: filter.limit, id: \.id)
            return EventPage(events: page.records, nextCursor: page.nextCursor)
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
            for try await (
                id, jti, types, sub, status, attempts, receivedAt, completedAt, shadow, issuer, issuedAt, runAfter, lastError, claims,
                events
            )
                in rows.decode(
                    (Int64, String, [String], String?, EventStatus, Int32, Date, Date?, Bool, String, Date, Date, String?, String, String).self)
            {
                let summary = EventSummary(row: (id, jti, types, sub, status, attempts, receivedAt, completedAt, shadow))
                let particulars = EventParticulars(
                    types: types, issuer: issuer, issuedAt: issuedAt, runAfter: EventStatus.waiting.contains(status) ? runAfter : nil,
                    lastError: lastError, claims: claims, events: SecurityEvent.stored(events.utf8), actions: [])
                found = EventDetail(first: summary, second: particulars)
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

    /// The ids of every dead event, oldest first (for `events replay --dead`).
    public func deadEventIDs() async throws -> [Int64] {
        try await bounded { connection in
            try await connection.values(
                "SELECT id FROM risc_events WHERE status = \(EventStatus.dead) ORDER BY id", as: Int64.self, logger: logger)
        }
    }

    public enum ReplayOutcome: Sendable, Equatable {
        case replayed
        case notFound
        /// Ignored events (no known type) have nothing to do.
        case ignored
    }

    /// What applying an event again would do now, whatever the mode: the actions decided from the stored event and
    /// run as shadow actions, which change nothing, in a transaction that is rolled back. Nil for no such event;
    /// no actions for an event of no known type.
    public func explain(id: Int64) async throws -> EventExplanation? {
        // The answer leaves the transaction as its error, so that postgres-nio rolls it back.
        struct Explained: Error { var explanation: EventExplanation? }
        do {
            try await client.transaction(timeout: timeout, logger: logger) { connection in
                throw Explained(explanation: try await self.explain(id: id, on: connection))
            }
        } catch let explained as Explained {
            return explained.explanation
        }
        return nil
    }

    private func explain(id: Int64, on connection: PostgresConnection) async throws -> EventExplanation? {
        var decided: Result<[(position: Int, action: AccountAction)], EventQueue.Failure>?
        for try await (status, eventsJSON, audienceJSON) in try await connection.query(
            "SELECT status, events::text, coalesce((claims->'aud')::text, 'null') FROM risc_events WHERE id = \(id)", logger: logger
        ).decode((EventStatus, String, String).self) {
            decided = status == .ignored ? .success([]) : EventQueue.decide(eventsJSON: eventsJSON, audienceJSON: audienceJSON)
        }
        guard let decided else { return nil }
        var explanation = EventExplanation(id: id, mode: EnforcementMode(enforce: enforce), actions: [])
        var actions = ActionBatch()
        for (position, action) in try await EmailSubjects.resolve(try decided.get(), on: connection, logger: logger) {
            actions.append(event: id, position: position, action)
        }
        guard !actions.isEmpty else { return explanation }
        // Judged as a replay in this mode would be: in enforcing mode, a shadow event as a replay of it.
        try await connection.query(
            "SELECT count(*) FROM risc_apply_actions(\(actions.json)::jsonb, NULL, '{}', false, \(enforce))", logger: logger)
        // Only the rows this transaction wrote: a worker may record the same event's actions meanwhile.
        for try await (kind, sub, detail, count) in try await connection.query(
            """
            SELECT kind, sub, detail, rows_affected FROM risc_event_actions
            WHERE event_id = \(id) AND xmin = pg_current_xact_id()::xid ORDER BY id
            """, logger: logger
        ).decode((ActionKind, String?, String?, Int32).self) {
            // A shadow action's detail says "would be"; a replay in enforcing mode would say it happened.
            explanation.actions.append(.init(kind: kind, sub: sub, detail: detail, rowsAffected: Int(count)))
        }
        return explanation
    }

    /// Makes every event received since `since` whose actions were last decided in shadow mode runnable again, in
    /// arrival order, and wakes the workers: once enforcement is on, they apply them, with the ordering rules of
    /// account state (by `iat`) as for any event. In pages of 1,000, each under the usual bound. Returns their ids.
    public func replayShadow(since: Date, progress: @Sendable (Int) -> Void = { _ in }) async throws -> [Int64] {
        var replayed: [Int64] = []
        while true {
            let after = replayed.last ?? 0
            let page = try await bounded { connection in
                let ids = try await connection.values(
                    """
                    WITH page AS (
                        SELECT id FROM risc_events
                        WHERE shadow AND status = \(EventStatus.done) AND received_at >= \(since) AND id > \(after)
                        ORDER BY id LIMIT 1000 FOR UPDATE
                    )
                    UPDATE risc_events e
                    SET status = \(EventStatus.pending), attempts = 0, run_after = now(), last_error = NULL, completed_at = NULL
                    FROM page WHERE e.id = page.id
                    RETURNING e.id
                    """, as: Int64.self, logger: logger)
                if !ids.isEmpty { try await connection.query("SELECT pg_notify(\(EventQueue.channel), '')", logger: logger) }
                return ids.sorted()
            }
            replayed += page
            progress(replayed.count)
            if page.count < 1000 { return replayed }
        }
    }

    /// Makes a finished, failed or dead event runnable again (an operator's replay) and wakes the workers.
    /// Its actions are applied again; every action is idempotent.
    public func replay(id: Int64) async throws -> ReplayOutcome {
        try await bounded { connection in
            var outcome = ReplayOutcome.notFound
            let rows = try await connection.query(
                """
                WITH target AS (SELECT id, status FROM risc_events WHERE id = \(id) FOR UPDATE),
                updated AS (
                    UPDATE risc_events e
                    SET status = \(EventStatus.pending), attempts = 0, run_after = now(), last_error = NULL, completed_at = NULL
                    FROM target WHERE e.id = target.id AND target.status = ANY(\(EventStatus.replayable))
                    RETURNING e.id
                )
                SELECT target.status, EXISTS (SELECT 1 FROM updated) FROM target
                """, logger: logger)
            for try await (_, updated) in rows.decode((EventStatus, Bool).self) { outcome = updated ? .replayed : .ignored }
            if outcome == .replayed { try await connection.query("SELECT pg_notify(\(EventQueue.channel), '')", logger: logger) }
            return outcome
        }
    }
}
