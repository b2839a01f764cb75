import DequeModule
import Foundation
import Logging
import PostgresNIO
import RISC
import RISCMetrics
import ServiceLifecycle
import Synchronization
import Tracing

/// A verified SET, ready to be stored.
public struct InboundEvent: Sendable {
    public var issuer: String
    public var jti: String
    public var eventTypes: [String]
    public var subjectSub: String?
    /// The decoded events as JSON (the typed model).
    public var eventsJSON: String
    /// The payload exactly as signed.
    public var claimsJSON: String
    public var issuedAt: Date
    /// `pending`, or `ignored` when no event is of a known type (stored, never worked on).
    public var status: EventStatus
    /// What the SET does, each action with its event's position in the SET; applied on receipt
    /// when the inbox is set to (`EventInbox.Settings.applyOnReceipt`), else by a worker from the stored row.
    public var actions: [(position: Int, action: AccountAction)]
    /// The span of the request that brought it (tracing on): the commit links to it, and its traceparent is stored.
    public var trace: ServiceContext?

    public init(token: SecurityEventToken) {
        issuer = token.issuer
        jti = token.jti
        eventTypes = token.events.map(\.typeURI)
        subjectSub = (token.primaryEvent ?? token.events.first)?.subject?.googleSubject
        eventsJSON = JSONValue.array(token.events.map(\.jsonValue)).serialized
        claimsJSON = String(decoding: token.payloadJSON, as: UTF8.self)
        issuedAt = token.issuedAt
        status = EventStatus.initial(knownType: !token.isIgnored)
        actions = status == .pending ? AccountAction.actions(for: token.events, audience: token.audience) : []
    }
}

/// The durable inbox for SETs, with group commit: concurrent `store` calls are gathered into one
/// multi-row INSERT, so one fsync covers many SETs. Each caller resumes only after the transaction
/// holding its row has committed.
///
/// With `applyOnReceipt`, that transaction also applies the new events' actions and stores them as done:
/// a revocation is then committed before the 202, however many events arrive at once, and each event is
/// written once. If applying fails, the batch is stored pending instead and a worker retries it.
public final class EventInbox: Service, Sendable {
    public enum Outcome: Sendable, Equatable {
        case stored
        /// The (issuer, jti) was already stored: nothing new was written.
        case duplicate
    }

    public enum Failure: Error, Sendable, Equatable {
        /// The database could not commit in time (down, overloaded, shutting down): retry later.
        case unavailable
        /// PostgreSQL refused this one row's data (say, a JSON string it cannot hold).
        case unstorable
    }

    public struct Settings: Sendable {
        /// The most batches committing at once; each holds one pooled connection while it commits. How many of them
        /// may commit at a time adapts to the database, from `initialFlushers` (`AdaptiveConcurrency`).
        public var flushers = 8
        public var initialFlushers = 2
        public var maxBatch = 1_000
        /// How long a batch may wait for the database before its callers get `unavailable`.
        public var commitTimeout: Duration = .seconds(5)
        /// Apply each new event's actions in the transaction that stores it (`serve` with its worker).
        /// Off, events are stored pending and a worker applies them (`serve --no-worker`).
        public var applyOnReceipt = false
        /// False is shadow mode: the actions applied on receipt are recorded as shadow actions and change nothing.
        public var enforce = true
        /// Called with the users a committed batch's actions named, before any of its callers resume: the
        /// process's session cache drops them, so a check after the 202 never answers from a stale entry.
        public var onApplied: (@Sendable ([String]) -> Void)?
        /// Told when a committed batch applied actions that may have written notifications (enforcing only): the
        /// process's dispatchers deliver them at once.
        public var outboxSignal: OutboxSignal?
        public init() {}
    }

    private struct Pending: Sendable {
        var event: InboundEvent
        var continuation: CheckedContinuation<Outcome, any Error>
        /// Arrival plus `commitTimeout`: the caller has its answer by then, whether its SET waited for a flusher
        /// (both may be stuck on a database that stopped answering) or for its batch's commit.
        var deadline: ContinuousClock.Instant
    }

    private struct State {
        var queue = Deque<Pending>()
        var idleFlushers: [CheckedContinuation<[Pending], Never>] = []
        var closed = false
        /// Batches taken and not yet committed.
        var committing = 0
        var concurrency: AdaptiveConcurrency

        var mayCommit: Bool { committing < concurrency.limit }

        mutating func takeBatch(max: Int) -> [Pending] {
            let count = Swift.min(max, queue.count)
            let batch = Array(queue.prefix(count))
            queue.removeFirst(count)
            committing += 1
            return batch
        }
    }

    private let client: PostgresClient
    private let settings: Settings
    private let logger: Logger
    private let state: Mutex<State>

    public init(client: PostgresClient, settings: Settings = Settings(), logger: Logger) {
        self.client = client
        self.settings = settings
        self.logger = logger
        state = Mutex(State(concurrency: AdaptiveConcurrency(initial: settings.initialFlushers, range: 1...max(1, settings.flushers))))
    }

    /// How many batches may commit at once now (tests, and the metrics).
    public var flushersAllowed: Int { state.withLock { $0.concurrency.limit } }

    /// Stores one event durably; returns once it is committed (or was already there).
    public func store(_ event: InboundEvent) async throws -> Outcome {
        try await withCheckedThrowingContinuation { continuation in
            enum Next {
                case wait
                case wake(CheckedContinuation<[Pending], Never>, [Pending])
                case refuse
            }
            let next: Next = state.withLock { state in
                guard !state.closed else { return .refuse }
                state.queue.append(Pending(event: event, continuation: continuation, deadline: .now + settings.commitTimeout))
                guard state.mayCommit, let idle = state.idleFlushers.popLast() else { return .wait }
                return .wake(idle, state.takeBatch(max: settings.maxBatch))
            }
            switch next {
            case .wait: break
            case .wake(let flusher, let batch): flusher.resume(returning: batch)
            case .refuse: continuation.resume(throwing: Failure.unavailable)
            }
        }
    }

    public func run() async throws {
        ServiceMetrics.inboxBatchesAllowed(flushersAllowed)
        // Cancellation (a sibling service failed) must stop the flushers as surely as a graceful shutdown.
        await withTaskCancellationOrGracefulShutdownHandler {
            await withDiscardingTaskGroup { group in
                for _ in 0..<settings.flushers {
                    group.addTask { await self.flushLoop() }
                }
            }
        } onCancelOrGracefulShutdown: {
            self.close()
        }
    }

    /// Stops taking new events; what is queued is still committed.
    public func close() {
        let woken = state.withLock { state in
            state.closed = true
            // Every parked flusher wakes: to what is queued (the limit no longer holds it back), or to an empty batch,
            // and stops.
            var woken: [(CheckedContinuation<[Pending], Never>, [Pending])] = []
            while let idle = state.idleFlushers.popLast() {
                woken.append((idle, state.queue.isEmpty ? [] : state.takeBatch(max: settings.maxBatch)))
            }
            return woken
        }
        for (flusher, batch) in woken { flusher.resume(returning: batch) }
    }

    private func flushLoop() async {
        while true {
            let batch: [Pending] = await withCheckedContinuation { continuation in
                let ready: [Pending]? = state.withLock { state in
                    // Closed, a flusher takes what is queued whatever the limit: none is left waiting for a wake-up.
                    if !state.queue.isEmpty && (state.mayCommit || state.closed) { return state.takeBatch(max: settings.maxBatch) }
                    if state.closed && state.queue.isEmpty { return [] }
                    state.idleFlushers.append(continuation)
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
            if batch.isEmpty { return }
            // A SET that waited out its whole bound for a flusher is answered at once, and not stored.
            let now = ContinuousClock.now
            let expired = batch.filter { $0.deadline <= now }
            for pending in expired { pending.continuation.resume(throwing: Failure.unavailable) }
            if !expired.isEmpty {
                logger.error("SETs waited longer than RISC_DATABASE_TIMEOUT for the database", metadata: ["count": "\(expired.count)"])
            }
            let live = batch.filter { $0.deadline > now }
            if !live.isEmpty { await commit(live) }
            committed(batch.count)
        }
    }

    /// A batch is done: its flusher's slot is free, and the limit learns from the rate. Flushers parked by the limit
    /// wake while it allows them and SETs wait.
    private func committed(_ count: Int) {
        let (woken, changed): ([(CheckedContinuation<[Pending], Never>, [Pending])], Int?) = state.withLock { state in
            let limitBound = !state.queue.isEmpty || state.committing >= state.concurrency.limit
            state.committing -= 1
            let changed = state.concurrency.batchCommitted(count: count, limitBound: limitBound, now: .now)
            var woken: [(CheckedContinuation<[Pending], Never>, [Pending])] = []
            // This flusher takes the next batch itself, so one slot is left for it.
            while !state.queue.isEmpty, state.committing + 1 < state.concurrency.limit, let idle = state.idleFlushers.popLast() {
                woken.append((idle, state.takeBatch(max: settings.maxBatch)))
            }
            return (woken, changed ? state.concurrency.limit : nil)
        }
        if let changed { ServiceMetrics.inboxBatchesAllowed(changed) }
        for (flusher, batch) in woken { flusher.resume(returning: batch) }
    }

    private func commit(_ batch: [Pending]) async {
        guard TraceContext.isEnabled else { return await commit(batch, span: nil) }
        // A trace of its own, as it serves many requests: linked to each request's span.
        await withSpan(settings.applyOnReceipt ? "store and apply SETs" : "store SETs", context: .topLevel, ofKind: .client) { span in
            for pending in batch {
                if let trace = pending.event.trace { span.addLink(SpanLink(context: trace, attributes: [:])) }
            }
            span.updateAttributes { attributes in
                attributes["db.system.name"] = "postgresql"
                attributes["db.operation.name"] = "CALL risc_ingest_batch"
                attributes["risc.batch.size"] = batch.count
                attributes["risc.mode"] = settings.enforce ? "enforce" : "shadow"
            }
            await commit(batch, span: span)
        }
    }

    private func commit(_ batch: [Pending], span: (any Span)?) async {
        do {
            // Bounded by the earliest caller's deadline; on the bound, the connection is closed, not left leased.
            let deadline = batch.map(\.deadline).min() ?? .now + settings.commitTimeout
            let (stored, applied, events) = try await client.withConnection(timeout: max(deadline - .now, .milliseconds(1))) { connection in
                var events = batch.map(\.event)
                let emails = events.flatMap { $0.actions.compactMap(\.action.user?.email) }
                if self.settings.applyOnReceipt, !emails.isEmpty {
                    let users = try await EmailSubjects.users(for: emails, on: connection, logger: self.logger)
                    for index in events.indices {
                        events[index].actions = events[index].actions.map { ($0.position, $0.action.resolvingEmail(users)) }
                    }
                }
                let (stored, applied) = try await self.insert(events, on: connection)
                return (stored, applied, events)
            }
            if let applied {
                span?.record(applied)
                ServiceMetrics.actionsApplied(applied.totals, enforced: settings.enforce)
                if settings.enforce {
                    settings.onApplied?(events.flatMap { $0.actions.compactMap(\.action.sub) })
                    settings.outboxSignal?.committed(applied.totals)
                }
            }
            for pending in batch {
                let key = EventKey(issuer: pending.event.issuer, jti: pending.event.jti)
                pending.continuation.resume(returning: stored.contains(key) ? .stored : .duplicate)
            }
        } catch let error as PSQLError where error.isRefusalOfData {
            guard batch.count > 1 else {
                logger.warning(
                    "A SET could not be stored", metadata: ["jti": "\(batch[0].event.jti)", "error": "\(error.serverInfo?[.message] ?? "")"])
                batch[0].continuation.resume(throwing: Failure.unstorable)
                return
            }
            // One row's data may have failed the whole statement: store them one by one, so that only that
            // SET is refused and the others commit. At once, each on a connection of its own: one after another,
            // the last could outlive its caller's deadline.
            await withDiscardingTaskGroup { group in
                for pending in batch { group.addTask { await self.commit([pending]) } }
            }
        } catch {
            span?.setStatus(.init(code: .error))
            logger.error("Could not commit SETs", metadata: ["count": "\(batch.count)", "error": "\(DatabaseErrors.describe(error))"])
            for pending in batch { pending.continuation.resume(throwing: Failure.unavailable) }
        }
    }

    private struct EventKey: Hashable {
        var issuer: String
        var jti: String
    }

    /// Stores the whole batch with one `CALL`; returns the keys that were new and, when the new events' actions
    /// were applied (on receipt), what they changed.
    ///
    /// Not a plain INSERT: an implicit transaction commits at Sync, after the rows have been delivered, and
    /// an explicit BEGIN … COMMIT costs two more round trips per batch. The procedure commits before it
    /// answers, so a returned CALL means the batch is durable.
    private func insert(_ events: [InboundEvent], on connection: PostgresConnection) async throws -> (stored: Set<EventKey>, applied: AppliedActions?)
    {
        var stored = Set<EventKey>()
        var applied: AppliedActions?
        for try await (positions, kinds, actions, rows, eventIDs) in try await connection.executePrepared(
            StoreEvents(events, apply: settings.applyOnReceipt, enforce: settings.enforce), logger: logger)
        {
            for position in positions ?? [] where position >= 1 && position <= events.count {
                let event = events[Int(position) - 1]
                stored.insert(EventKey(issuer: event.issuer, jti: event.jti))
            }
            if let kinds, let actions, let rows, let eventIDs {
                applied = AppliedActions(events: eventIDs, kinds: kinds, actions: actions, rows: rows)
            }
        }
        return (stored, applied)
    }
}

/// The batch CALL, prepared once per connection: it runs hundreds of times a second under load.
/// The SETs travel as parallel arrays, one element per SET, zipped back into rows by `unnest` inside the
/// procedure; their actions as one JSON array (`ActionBatch`), each naming the 1-based place of its SET.
private struct StoreEvents: PostgresPreparedStatement {
    static let sql = """
        CALL risc_ingest_batch($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::float8[], $8::text[],
                                $9::jsonb, $10::bool, NULL, NULL, NULL, NULL, NULL, $11::bool, $12::text[])
        """
    /// The new rows' places in the batch; then, if applied on receipt, each action kind recorded with its number of
    /// actions and the rows they changed.
    typealias Row = (stored: [Int64]?, kinds: [String]?, actions: [Int64]?, rows: [Int64]?, events: [Int64]?)

    let events: [InboundEvent]
    let apply: Bool
    let enforce: Bool

    init(_ events: [InboundEvent], apply: Bool, enforce: Bool) {
        self.events = events
        self.apply = apply
        self.enforce = enforce
    }

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 12)
        bindings.append(events.map(\.issuer))
        bindings.append(events.map(\.jti))
        bindings.append(events.map { JSONValue.array($0.eventTypes.map(JSONValue.string)).serialized })
        bindings.append(events.map { $0.subjectSub ?? "" })
        bindings.append(events.map(\.eventsJSON))
        bindings.append(events.map(\.claimsJSON))
        bindings.append(events.map { $0.issuedAt.timeIntervalSince1970 })
        try bindings.append(events.map(\.status))
        // Without apply the procedure ignores the actions: none are sent.
        var actions = ActionBatch()
        if apply {
            for (row, event) in events.enumerated() {
                for (position, action) in event.actions { actions.append(event: Int64(row + 1), position: position, action) }
            }
        }
        bindings.append(actions.json)
        bindings.append(apply)
        bindings.append(enforce)
        // Tracing off: no request has a span, and NULL is sent (an empty string is one without).
        if TraceContext.isEnabled {
            bindings.append(events.map { TraceContext.traceparent(of: $0.trace) ?? "" })
        } else {
            bindings.appendNull()
        }
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try row.decode(([Int64]?, [String]?, [Int64]?, [Int64]?, [Int64]?).self)
    }
}
