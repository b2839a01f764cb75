import Foundation
import Logging
import PostgresNIO
import RISC
import Tracing

/// The worker's side of `risc_events`: claiming waiting events and applying them, or recording why they failed.
/// One batch, top to bottom, in one transaction:
/// 1. `claim`: waiting events (`pending`, or `retry` once due) with `FOR UPDATE SKIP LOCKED`;
/// 2. `AccountAction.actions(for:audience:)` (module RISC) decides each event's actions, without I/O;
/// 3. `apply`: `risc_apply_actions` (SQL) sorts the actions by user, takes each user's lock, carries the
///    actions out, records them, marks the events `done`, and totals what they changed.
/// A worker killed at any instant rolls back with its connection: the events stay waiting and nothing is
/// applied twice. A failing event goes to `retry` or `dead` (`recordFailure`); an operator brings one back
/// (`EventAdmin.replay`).
public struct EventQueue: BoundedStore {
    /// Notified when events are left for a worker: by the insert trigger, and by an operator's replay.
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
    /// Each transaction's bound (a worker's batch timeout); on it, the connection is closed.
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
                for (position, action) in try await EmailSubjects.resolve(decided, on: connection, logger: logger) {
                    actions.append(event: event.id, position: position, action)
                }
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
            try await connection.values(
                """
                SELECT id FROM risc_events WHERE status = ANY(\(EventStatus.waiting)) AND run_after <= now()
                ORDER BY run_after, id LIMIT \(limit)
                """, as: Int64.self, logger: logger)
        }
    }
}
