import DequeModule
import Foundation
import Logging
import PostgresNIO
import RISC
import ServiceLifecycle
import Synchronization

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

    public init(token: SecurityEventToken) {
        issuer = token.issuer
        jti = token.jti
        eventTypes = token.events.map(\.typeURI)
        subjectSub = (token.primaryEvent ?? token.events.first)?.subject?.googleSubject
        eventsJSON = JSONValue.array(token.events.map(\.jsonValue)).serialized
        claimsJSON = String(decoding: token.payloadJSON, as: UTF8.self)
        issuedAt = token.issuedAt
        status = EventStatus.initial(knownType: !token.isIgnored)
    }
}

/// The durable inbox for SETs, with group commit: concurrent `store` calls are gathered into one
/// multi-row INSERT, so one fsync covers many SETs. Each caller resumes only after the transaction
/// holding its row has committed.
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
        /// Concurrent INSERTs; each holds one pooled connection while it commits.
        public var flushers = 2
        public var maxBatch = 1_000
        /// How long a batch may wait for the database before its callers get `unavailable`.
        public var commitTimeout: Duration = .seconds(5)
        public init() {}
    }

    private struct Pending: Sendable {
        var event: InboundEvent
        var continuation: CheckedContinuation<Outcome, any Error>
    }

    private struct State {
        var queue = Deque<Pending>()
        var idleFlushers: [CheckedContinuation<[Pending], Never>] = []
        var closed = false

        mutating func takeBatch(max: Int) -> [Pending] {
            let count = Swift.min(max, queue.count)
            let batch = Array(queue.prefix(count))
            queue.removeFirst(count)
            return batch
        }
    }

    private let client: PostgresClient
    private let settings: Settings
    private let logger: Logger
    private let state = Mutex(State())

    public init(client: PostgresClient, settings: Settings = Settings(), logger: Logger) {
        self.client = client
        self.settings = settings
        self.logger = logger
    }

    /// Stores one event durably; returns once it is committed (or was already there).
    public func store(_ event: InboundEvent) async throws -> Outcome {
        try await withCheckedThrowingContinuation { continuation in
            enum Next { case wait, wake(CheckedContinuation<[Pending], Never>, [Pending]), refuse }
            let next: Next = state.withLock { state in
                guard !state.closed else { return .refuse }
                state.queue.append(Pending(event: event, continuation: continuation))
                guard let idle = state.idleFlushers.popLast() else { return .wait }
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
        let idle = state.withLock { state in
            state.closed = true
            guard state.queue.isEmpty else { return [CheckedContinuation<[Pending], Never>]() }
            let idle = state.idleFlushers
            state.idleFlushers.removeAll()
            return idle
        }
        // Flushers parked with nothing queued wake up to an empty batch and stop.
        for flusher in idle { flusher.resume(returning: []) }
    }

    private func flushLoop() async {
        while true {
            let batch: [Pending] = await withCheckedContinuation { continuation in
                let ready: [Pending]? = state.withLock { state in
                    if !state.queue.isEmpty { return state.takeBatch(max: settings.maxBatch) }
                    if state.closed { return [] }
                    state.idleFlushers.append(continuation)
                    return nil
                }
                if let ready { continuation.resume(returning: ready) }
            }
            if batch.isEmpty { return }
            await commit(batch)
        }
    }

    private func commit(_ batch: [Pending]) async {
        do {
            let stored = try await withTimeout(settings.commitTimeout) {
                try await self.insert(batch.map(\.event))
            }
            for pending in batch {
                let key = EventKey(issuer: pending.event.issuer, jti: pending.event.jti)
                pending.continuation.resume(returning: stored.contains(key) ? .stored : .duplicate)
            }
        } catch let error as PSQLError where error.isRefusalOfData {
            guard batch.count > 1 else {
                logger.warning("A SET could not be stored", metadata: ["jti": "\(batch[0].event.jti)", "error": "\(error.serverInfo?[.message] ?? "")"])
                batch[0].continuation.resume(throwing: Failure.unstorable)
                return
            }
            // One row's data may have failed the whole statement: store them one by one, so that only that
            // SET is refused and the others commit.
            for pending in batch { await commit([pending]) }
        } catch {
            logger.error("Could not commit SETs", metadata: ["count": "\(batch.count)", "error": "\(Self.describe(error))"])
            for pending in batch { pending.continuation.resume(throwing: Failure.unavailable) }
        }
    }

    /// An error for the log. Never the query's bound values: they hold the claims.
    public static func describe(_ error: any Error) -> String {
        guard let error = error as? PSQLError else { return String(describing: error) }
        let sqlState = error.serverInfo?[.sqlState].map { " sqlstate=\($0)" } ?? ""
        let message = error.serverInfo?[.message].map { " \($0)" } ?? ""
        return "\(error.code)\(sqlState)\(message)"
    }

    private struct EventKey: Hashable {
        var issuer: String
        var jti: String
    }

    /// Stores the whole batch with one `CALL`; returns the keys that were new.
    ///
    /// Not a plain INSERT: an implicit transaction commits at Sync, after the rows have been delivered, and
    /// an explicit BEGIN … COMMIT costs two more round trips per batch. The procedure commits before it
    /// answers, so a returned CALL means the batch is durable.
    private func insert(_ events: [InboundEvent]) async throws -> Set<EventKey> {
        var stored = Set<EventKey>()
        for try await positions in try await client.execute(StoreEvents(events), logger: logger) {
            for position in positions ?? [] where position >= 1 && position <= events.count {
                let event = events[Int(position) - 1]
                stored.insert(EventKey(issuer: event.issuer, jti: event.jti))
            }
        }
        return stored
    }
}

/// The batch CALL, prepared once per connection: it runs hundreds of times a second under load.
/// Columns travel as parallel arrays and are zipped back into rows by `unnest` inside the procedure.
private struct StoreEvents: PostgresPreparedStatement {
    static let sql = """
        CALL risc_store_events($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::float8[], $8::text[], NULL)
        """
    typealias Row = [Int64]?

    let events: [InboundEvent]

    init(_ events: [InboundEvent]) { self.events = events }

    func makeBindings() throws -> PostgresBindings {
        var bindings = PostgresBindings(capacity: 8)
        bindings.append(events.map(\.issuer))
        bindings.append(events.map(\.jti))
        bindings.append(events.map { JSONValue.array($0.eventTypes.map(JSONValue.string)).serialized })
        bindings.append(events.map { $0.subjectSub ?? "" })
        bindings.append(events.map(\.eventsJSON))
        bindings.append(events.map(\.claimsJSON))
        bindings.append(events.map { $0.issuedAt.timeIntervalSince1970 })
        try bindings.append(events.map(\.status))
        return bindings
    }

    func decodeRow(_ row: PostgresRow) throws -> Row {
        try row.decode([Int64]?.self)
    }
}

extension PSQLError {
    /// SQLSTATE classes that say the database cannot take writes now, whatever the data: connection trouble,
    /// transaction rollbacks (deadlock, serialization), resources, shutdown, system and internal errors, and a
    /// schema or role that is not what the service expects. A SET failing with one of these gets 503.
    static let unavailableClasses: Set<Substring> = [
        "08", "25", "28", "3D", "3F", "40", "42", "53", "55", "57", "58", "F0", "XX",
    ]

    /// The server refused the statement for a reason that may lie in one row's data (any other SQLSTATE:
    /// a data exception, a constraint, an index row too large, ...). Only a statement of that one row can
    /// tell; its SET is then refused with 400, while the others commit.
    var isRefusalOfData: Bool {
        guard code == .server, let sqlState = serverInfo?[.sqlState] else { return false }
        return !Self.unavailableClasses.contains(sqlState.prefix(2))
    }
}

public struct TimeoutError: Error {}

/// Runs `operation`, throwing `TimeoutError` if it takes longer than `timeout`, or `CancellationError` as soon
/// as the caller is cancelled. Either way the operation is cancelled but not awaited: a database client
/// waiting out a reconnect backoff, or a connection lease after the server restarted, may not notice the
/// cancellation for a long while, and the caller must not wait with it.
public func withTimeout<Result: Sendable>(
    _ timeout: Duration, _ operation: @escaping @Sendable () async throws -> Result
) async throws -> Result {
    let once = ResumeOnce<Result>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { continuation in
            once.set(continuation)
            let work = Task {
                do { once.resume(with: .success(try await operation())) } catch { once.resume(with: .failure(error)) }
            }
            once.setWork(work)
            once.setTimer(
                Task {
                    guard (try? await Task.sleep(for: timeout)) != nil else { return }
                    once.resume(with: .failure(TimeoutError()))
                })
        }
    } onCancel: {
        once.resume(with: .failure(CancellationError()))
    }
}

/// A continuation that only the first of several racers resumes; resuming also stops the timer.
private final class ResumeOnce<Value: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Value, any Error>?
        var timer: Task<Void, Never>?
        var work: Task<Void, Never>?
        var finished = false
        /// A resume (cancellation) that came before the continuation was set.
        var early: Result<Value, any Error>?
    }

    private let state = Mutex(State())

    func set(_ continuation: CheckedContinuation<Value, any Error>) {
        let early: Result<Value, any Error>? = state.withLock { state in
            if let early = state.early { return early }
            state.continuation = continuation
            return nil
        }
        if let early { continuation.resume(with: early) }
    }

    func setWork(_ work: Task<Void, Never>) {
        let finished = state.withLock { state in
            if !state.finished { state.work = work }
            return state.finished
        }
        if finished { work.cancel() }
    }

    func setTimer(_ timer: Task<Void, Never>) {
        let finished = state.withLock { state in
            if !state.finished { state.timer = timer }
            return state.finished
        }
        if finished { timer.cancel() }
    }

    /// Resumes if nobody has yet (the operation's result, the timeout or the caller's cancellation), and
    /// stops the others: the timer, and the operation unless it is the one that finished. Returns whether
    /// this call was the first.
    @discardableResult
    func resume(with result: Result<Value, any Error>) -> Bool {
        typealias Taken = (CheckedContinuation<Value, any Error>?, Task<Void, Never>?, Task<Void, Never>?)
        let taken: Taken? = state.withLock { state in
            guard !state.finished else { return nil }
            state.finished = true
            let taken = (state.continuation, state.timer, state.work)
            // Cancelled before the continuation exists: `set` resumes it with this at once.
            if state.continuation == nil { state.early = result }
            state.continuation = nil
            state.timer = nil
            state.work = nil
            return taken
        }
        guard let (continuation, timer, work) = taken else { return false }
        timer?.cancel()
        work?.cancel()
        continuation?.resume(with: result)
        return true
    }
}
