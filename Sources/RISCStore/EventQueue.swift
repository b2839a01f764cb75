import Foundation
import Logging
import PostgresNIO
import RISC
import Tracing

/// The worker's side of `risc_events`, and every status change after ingest (`EventStatus`).
/// One batch, top to bottom, in one transaction:
/// 1. `claim`: waiting events (`pending`, or `retry` once due) with `FOR UPDATE SKIP LOCKED`;
/// 2. `AccountAction.actions(for:audience:)` (module RISC) decides each event's actions, without I/O;
/// 3. `apply`: `risc_apply_actions` (SQL) sorts the actions by user, takes each user's lock, carries the
///    actions out, records them, marks the events `done`, and totals what they changed.
/// A worker killed at any instant rolls back with its connection: the events stay waiting and nothing is
/// applied twice. A failing event goes to `retry` or `dead` (`recordFailure`); `replay` brings one back.
public struct EventQueue: Sendable {
    /// Notified when events are left for a worker: by the insert trigger, and by `replay`.
    public static let channel = "risc_events"

    public struct BatchResult: Sendable, Equatable {
        public var claimed = 0
        public var done = 0
        public var failed = 0
        /// Of the failed: scheduled again, or dead-lettered.
        public var retried = 0
        public var dead = 0
        /// What the done events' actions changed.
        public var totals = ActionTotals()
        public init() {}

        mutating func add(_ other: BatchResult) {
            claimed += other.claimed
            done += other.done
            failed += other.failed
            retried += other.retried
            dead += other.dead
            totals.add(other.totals)
        }
    }

    let client: PostgresClient
    let retryPolicy: RetryPolicy
    let logger: Logger
    /// Each transaction's bound; on it, the connection is closed (a worker's: its batch timeout; an admin's
    /// replay: RISC_DATABASE_TIMEOUT).
    let timeout: Duration
    /// False is shadow mode: the actions are recorded as shadow actions and change nothing.
    let enforce: Bool

    public init(
        client: PostgresClient, retryPolicy: RetryPolicy = .init(), timeout: Duration = .seconds(30), enforce: Bool = true, logger: Logger
    ) {
        self.client = client
        self.retryPolicy = retryPolicy
        self.timeout = timeout
        self.enforce = enforce
        self.logger = logger
    }

    private func bounded<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await client.withConnection(timeout: timeout, body)
    }

    struct Claimed {
        var id: Int64
        var attempts: Int
        /// The request that stored it, when it was traced.
        var traceparent: String?
        /// Each action with the position of its event in the SET.
        var actions: Result<[(position: Int, action: AccountAction)], Failure>
    }

    struct Failure: Error {
        var message: String
    }

    /// Claims up to `limit` runnable events and applies them. If the batch fails as a whole (one event's
    /// actions hit an error), each event is retried alone so only the failing one is scheduled for retry.
    public func processBatch(limit: Int) async throws -> BatchResult {
        var result = BatchResult()
        do {
            return try await client.transaction(timeout: timeout, logger: logger) { connection in
                let claimed = try await self.claim(limit: limit, id: nil, on: connection)
                return try await self.apply(claimed, on: connection)
            }
        } catch let error as PSQLError where error.code == .server {
            logger.warning("A batch failed; applying its events one by one", metadata: ["error": "\(DatabaseErrors.describe(error))"])
        }
        // The failed transaction rolled back; claim again, one event per transaction.
        let ids = try await runnableIDs(limit: limit)
        for id in ids {
            do {
                result.add(
                    try await client.transaction(timeout: timeout, logger: logger) { connection in
                        let claimed = try await self.claim(limit: 1, id: id, on: connection)  // empty if another worker has it
                        return try await self.apply(claimed, on: connection)
                    })
            } catch let error as PSQLError where error.code == .server {
                if let status = try await recordFailure(id: id, message: DatabaseErrors.describe(error)) {
                    result.claimed += 1
                    result.failed += 1
                    if status == .dead { result.dead += 1 } else { result.retried += 1 }
                }
            }
        }
        return result
    }

    private func claim(limit: Int, id: Int64?, on connection: PostgresConnection) async throws -> [Claimed] {
        let rows: PostgresRowSequence
        if let id {
            rows = try await connection.query(
                """
                SELECT id, events::text, attempts, coalesce((claims->'aud')::text, 'null'), traceparent FROM risc_events
                WHERE id = \(id) AND status = ANY(\(EventStatus.waiting)) FOR UPDATE SKIP LOCKED
                """, logger: logger)
        } else {
            rows = try await connection.query(
                """
                SELECT id, events::text, attempts, coalesce((claims->'aud')::text, 'null'), traceparent FROM risc_events
                WHERE status = ANY(\(EventStatus.waiting)) AND run_after <= now()
                ORDER BY run_after, id LIMIT \(limit) FOR UPDATE SKIP LOCKED
                """, logger: logger)
        }
        var claimed: [Claimed] = []
        for try await (id, eventsJSON, attempts, audienceJSON, traceparent) in rows.decode((Int64, String, Int32, String, String?).self) {
            claimed.append(
                Claimed(
                    id: id, attempts: Int(attempts), traceparent: traceparent,
                    actions: Self.decide(eventsJSON: eventsJSON, audienceJSON: audienceJSON)))
        }
        return claimed
    }

    /// A stored event's actions, decided again from its stored events and audience.
    static func decide(eventsJSON: String, audienceJSON: String) -> Result<[(position: Int, action: AccountAction)], Failure> {
        guard let events = SecurityEvent.stored(eventsJSON.utf8) else {
            return .failure(Failure(message: "the stored events cannot be decoded"))
        }
        return .success(AccountAction.actions(for: events, audience: Self.audience(audienceJSON)))
    }

    /// The `aud` claim as a list: a string, or the strings of an array.
    static func audience(_ json: String) -> [String] {
        switch try? JSONValue.parse(json.utf8) {
        case .string(let value)?: [value]
        case .array(let values)?: values.compactMap(\.stringValue)
        default: []
        }
    }

    /// Applies every decodable event's actions in one call, and schedules the others for retry.
    private func apply(_ claimed: [Claimed], on connection: PostgresConnection) async throws -> BatchResult {
        guard TraceContext.isEnabled, !claimed.isEmpty else { return try await apply(claimed, on: connection, span: nil) }
        // A trace of its own, as it serves events stored earlier: linked to each one's request.
        return try await withSpan("apply events", context: .topLevel, ofKind: .consumer) { span in
            for event in claimed {
                if let link = TraceContext.link(traceparent: event.traceparent) { span.addLink(link) }
            }
            span.updateAttributes { attributes in
                attributes["db.system.name"] = "postgresql"
                attributes["db.operation.name"] = "SELECT risc_apply_actions"
                attributes["risc.batch.size"] = claimed.count
                attributes["risc.mode"] = enforce ? "enforce" : "shadow"
            }
            return try await apply(claimed, on: connection, span: span)
        }
    }

    private func apply(_ claimed: [Claimed], on connection: PostgresConnection, span: (any Span)?) async throws -> BatchResult {
        var result = BatchResult()
        result.claimed = claimed.count
        guard !claimed.isEmpty else { return result }
        var actions = ActionBatch()
        var done: [Int64] = []
        for event in claimed {
            switch event.actions {
            case .success(let decided):
                done.append(event.id)
                for (position, action) in decided { actions.append(event: event.id, position: position, action) }
            case .failure(let failure):
                let status = try await recordFailure(id: event.id, attempts: event.attempts, message: failure.message, on: connection)
                result.failed += 1
                if status == .dead { result.dead += 1 } else { result.retried += 1 }
            }
        }
        // The function sorts the actions by user (every worker then takes users' locks in one order), applies
        // them, marks the events done, and says what they changed, for the metrics (counted once it commits).
        var applied = AppliedActions(events: [], kinds: [], actions: [], rows: [])
        for try await (event, kind, recorded, changed) in try await connection.query(
            """
            SELECT applied_event, kind, actions_recorded, rows_changed
            FROM risc_apply_actions(\(actions.json)::jsonb, NULL, \(done), \(enforce))
            """, logger: logger
        ).decode((Int64, String, Int64, Int64).self) {
            applied.events.append(event)
            applied.kinds.append(kind)
            applied.actions.append(recorded)
            applied.rows.append(changed)
        }
        span?.record(applied)
        result.done = done.count
        result.totals = applied.totals
        return result
    }

    /// Counts a failed attempt: retry later with backoff, or dead-letter after the last attempt. Returns the new status.
    @discardableResult
    private func recordFailure(id: Int64, attempts: Int, message: String, on connection: PostgresConnection) async throws -> EventStatus {
        let (status, delay) = failureDecision(attempts: attempts + 1)
        try await connection.query(
            """
            UPDATE risc_events
            SET attempts = attempts + 1, status = \(status), run_after = now() + make_interval(secs => \(delay)),
                last_error = \(message)
            WHERE id = \(id) AND status = ANY(\(EventStatus.waiting))
            """, logger: logger)
        logFailure(id: id, attempts: attempts + 1, status: status, message: message)
        return status
    }

    /// The new status, or nil when the event was no longer this worker's to fail.
    private func recordFailure(id: Int64, message: String) async throws -> EventStatus? {
        try await client.transaction(timeout: timeout, logger: logger) { connection in
            let rows = try await connection.query(
                "SELECT attempts FROM risc_events WHERE id = \(id) AND status = ANY(\(EventStatus.waiting)) FOR UPDATE SKIP LOCKED",
                logger: logger)
            var status: EventStatus?
            for try await attempts in rows.decode(Int32.self) {
                status = try await self.recordFailure(id: id, attempts: Int(attempts), message: message, on: connection)
            }
            return status
        }
    }

    private func failureDecision(attempts: Int) -> (status: EventStatus, delay: Double) {
        switch retryPolicy.decision(afterFailedAttempts: attempts, jitter: Double.random(in: 0...1)) {
        case .retry(let seconds): (.retry, seconds)
        case .dead: (.dead, 0)
        }
    }

    private func logFailure(id: Int64, attempts: Int, status: EventStatus, message: String) {
        let metadata: Logger.Metadata = ["event_id": "\(id)", "attempts": "\(attempts)", "error": "\(message)"]
        if status == .dead {
            logger.error("An event failed its last attempt and is dead-lettered", metadata: metadata)
        } else {
            logger.warning("An event failed; it will be retried", metadata: metadata)
        }
    }

    private func runnableIDs(limit: Int) async throws -> [Int64] {
        try await bounded { connection in
            var ids: [Int64] = []
            let rows = try await connection.query(
                """
                SELECT id FROM risc_events WHERE status = ANY(\(EventStatus.waiting)) AND run_after <= now()
                ORDER BY run_after, id LIMIT \(limit)
                """, logger: logger)
            for try await id in rows.decode(Int64.self) { ids.append(id) }
            return ids
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
        var decided: Result<[(position: Int, action: AccountAction)], Failure>?
        for try await (status, eventsJSON, audienceJSON) in try await connection.query(
            "SELECT status, events::text, coalesce((claims->'aud')::text, 'null') FROM risc_events WHERE id = \(id)", logger: logger
        ).decode((EventStatus, String, String).self) {
            decided = status == .ignored ? .success([]) : Self.decide(eventsJSON: eventsJSON, audienceJSON: audienceJSON)
        }
        guard let decided else { return nil }
        var explanation = EventExplanation(id: id, mode: EnforcementMode(enforce: enforce), actions: [])
        var actions = ActionBatch()
        for (position, action) in try decided.get() { actions.append(event: id, position: position, action) }
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
                var ids: [Int64] = []
                for try await id in try await connection.query(
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
                    """, logger: logger
                ).decode(Int64.self) {
                    ids.append(id)
                }
                if !ids.isEmpty { try await connection.query("SELECT pg_notify(\(Self.channel), '')", logger: logger) }
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
            if outcome == .replayed { try await connection.query("SELECT pg_notify(\(Self.channel), '')", logger: logger) }
            return outcome
        }
    }
}
