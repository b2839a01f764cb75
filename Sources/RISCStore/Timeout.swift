import Logging
import PostgresNIO
import RISC
import Synchronization

public struct TimeoutError: Error {
    public init() {}
}

/// Runs `operation`, throwing `TimeoutError` if it takes longer than `timeout`, or `CancellationError` as soon
/// as the caller is cancelled. Either way the operation is cancelled but not awaited: a database client
/// waiting out a reconnect backoff, or a connection lease after the server restarted, may not notice the
/// cancellation for a long while, and the caller must not wait with it.
public func withTimeout<Result: Sendable>(
    _ timeout: Duration, _ operation: @escaping @Sendable () async throws -> Result
) async throws -> Result {
    try await race(operation) {
        try await Task.sleep(for: timeout)
        throw TimeoutError()
    }
}

/// The connection closed while `whileOpen` ran on it (the server ended it, or the network failed).
public struct ConnectionClosed: Error, CustomStringConvertible {
    public var description: String { "the database connection closed" }
}

/// Runs `operation`, which uses `connection`, and throws `ConnectionClosed` as soon as the connection closes,
/// without waiting for the operation (cancelled, not awaited): postgres-nio 1.33.2 never answers a query written
/// to a connection that has already closed, so a loop of queries on a connection of its own would wait forever.
public func whileOpen<Result: Sendable>(
    _ connection: PostgresConnection, _ operation: @escaping @Sendable () async throws -> Result
) async throws -> Result {
    try await race(operation) {
        try await connection.closeFuture.get()
        throw ConnectionClosed()
    }
}

/// Runs `operation` against `rival`: the result is the operation's, unless the rival throws first (its error is
/// thrown) or the caller is cancelled (`CancellationError`). The loser is cancelled, never awaited. A rival that
/// is cancelled (throws `CancellationError`) loses silently.
func race<Result: Sendable>(
    _ operation: @escaping @Sendable () async throws -> Result, rival: @escaping @Sendable () async throws -> Never
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
                    do { try await rival() } catch is CancellationError {} catch { once.resume(with: .failure(error)) }
                })
        }
    } onCancel: {
        once.resume(with: .failure(CancellationError()))
    }
}

/// A continuation that only the first of several racers resumes; resuming also stops the other racers.
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

extension PostgresClient {
    /// Leases a connection and runs `body` on it for at most `timeout`. When the time is up, or the caller is
    /// cancelled, the connection is closed rather than abandoned: a connection whose server has vanished (its host
    /// died, a failover moved its address, a NAT forgot it) stays silent for good, and postgres-nio 1.33.2 would
    /// keep it leased to the operation that gave up, until every connection of the pool is. Closed, the pool
    /// replaces it. (postgres-nio does not expose the socket, so TCP keepalives cannot be set on this side.)
    public func withConnection<Result: Sendable>(
        timeout: Duration, _ body: @escaping @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        let lease = AbandonableLease()
        do {
            return try await withTimeout(timeout) {
                try await self.withConnection { connection in
                    try lease.hold(connection)
                    let preparation = PreparationFailure()
                    do {
                        return try await PreparationFailure.$current.withValue(preparation) { try await body(connection) }
                    } catch {
                        // Once the body is done (a transaction's ROLLBACK written to a closed connection would never
                        // be answered), and before the pool can lease the connection again.
                        if preparation.happened { try? await connection.close() }
                        throw error
                    }
                }
            }
        } catch let error as TimeoutError {
            lease.abandon()
            throw error
        } catch let error as CancellationError {
            lease.abandon()
            throw error
        }
    }

    /// `withConnection(timeout:)` for work that may rightly take longer than a call's bound (counting every stored
    /// event): it has `limit` in all, but only while the database answers. Throughout, `SELECT 1` on another
    /// connection runs again and again under `timeout`; the first that fails ends the work with its error. A
    /// database gone silent under it ends it within `timeout` and a quarter second, as it ends any other call.
    public func withConnection<Result: Sendable>(
        timeout: Duration, whileAnswering limit: Duration, logger: Logger,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        try await race({ try await self.withConnection(timeout: limit, body) }) {
            while true {
                try await Task.sleep(for: .milliseconds(250))
                _ = try await self.withConnection(timeout: timeout) { connection in
                    try await connection.query("SELECT 1", logger: logger)
                }
            }
        }
    }

    /// `transaction`, bounded as `withConnection(timeout:)` is.
    public func transaction<Result: Sendable>(
        timeout: Duration, logger: Logger, _ body: @escaping @Sendable (PostgresConnection) async throws -> Result
    ) async throws -> Result {
        try await withConnection(timeout: timeout) { connection in
            try await connection.transaction(logger: logger) { connection in try await body(connection) }
        }
    }
}

/// Whether a prepared statement failed on the connection of the `withConnection(timeout:)` body running now
/// (`executePrepared`): that connection is closed once the body is done.
final class PreparationFailure: Sendable {
    @TaskLocal static var current: PreparationFailure?

    private let failed = Atomic<Bool>(false)

    var happened: Bool { failed.load(ordering: .relaxed) }

    func record() { failed.store(true, ordering: .relaxed) }
}

/// The connection an operation leased, closed if the operation is given up on; a lease granted after that is
/// closed at once.
final class AbandonableLease: Sendable {
    private struct State {
        var connection: PostgresConnection?
        var abandoned = false
    }

    private let state = Mutex(State())

    func hold(_ connection: PostgresConnection) throws {
        let abandoned = state.withLock { state in
            state.connection = connection
            return state.abandoned
        }
        if abandoned {
            Self.close(connection)
            throw CancellationError()
        }
    }

    func abandon() {
        let connection: PostgresConnection? = state.withLock { state in
            state.abandoned = true
            return state.connection
        }
        if let connection { Self.close(connection) }
    }

    static func close(_ connection: PostgresConnection) {
        Task { try? await connection.close() }
    }
}

/// A store each of whose calls has one bound (RISC_DATABASE_TIMEOUT, or a worker's batch timeout): past it the
/// connection is closed and the call throws `TimeoutError`.
protocol BoundedStore: Sendable {
    var client: PostgresClient { get }
    var timeout: Duration { get }
}

extension BoundedStore {
    func bounded<T: Sendable>(_ body: @escaping @Sendable (PostgresConnection) async throws -> T) async throws -> T {
        try await client.withConnection(timeout: timeout, body)
    }
}

/// Adding or using a secret sealed with the vault key (a subscriber's, a transmitter's credential) needs the key.
public struct VaultKeyMissing: Error, CustomStringConvertible {
    /// Whose secrets: "subscribers' secrets", "transmitters' credentials".
    let secrets: String
    public var description: String { "RISC_VAULT_KEY is not set: \(secrets) are stored sealed with it" }
}

/// A bounded store that seals what it keeps with RISC_VAULT_KEY; nil without the key.
protocol SealingStore: BoundedStore {
    var cipher: VaultCipher? { get }
    /// Whose secrets, for `VaultKeyMissing`.
    static var secrets: String { get }
}

extension SealingStore {
    func requireCipher() throws -> VaultCipher {
        guard let cipher else { throw VaultKeyMissing(secrets: Self.secrets) }
        return cipher
    }
}
