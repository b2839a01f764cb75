import Logging
import PostgresNIO
import RISC
import RISCMetrics
import RISCStore
import ServiceLifecycle
import Synchronization

/// Works through stored events. Woken at once by the inbox's `NOTIFY risc_events`, and by a
/// periodic poll as a fallback (a lost notification, a retry coming due). Several loops claim disjoint
/// batches; any number of worker processes may run beside this one. On graceful shutdown each loop
/// finishes the batch it holds and stops.
public final class EventWorker: Service, Sendable {
    public struct Settings: Sendable {
        public var batchSize = 500
        /// Batches in flight in this process, each on its own connection.
        public var concurrency = 2
        public var pollInterval: Duration = .seconds(1)
        /// A batch that has not finished by then is abandoned (it rolls back, or commits on its own) and the
        /// loop goes on: after PostgreSQL restarts, a connection lease can wait for ever without noticing
        /// cancellation, and would otherwise silence the loop and hold up shutdown.
        public var batchTimeout: Duration = .seconds(30)
        public var retryPolicy = RetryPolicy()
        /// False is shadow mode: actions are recorded as shadow actions and change nothing.
        public var enforce = true
        /// Deleting old events (RISC_EVENT_RETENTION_DAYS) runs beside the loops.
        public var retention = EventRetention.Settings()
        /// Told when a batch applied actions that may have written notifications: the process's dispatchers.
        public var outboxSignal: OutboxSignal?
        public init() {}
    }

    public static let channel = EventQueue.channel

    let client: PostgresClient
    let settings: Settings
    let logger: Logger
    let queue: EventQueue
    private let wakers = Mutex<[AsyncStream<Void>.Continuation]>([])

    public init(client: PostgresClient, settings: Settings = .init(), logger: Logger) {
        self.client = client
        self.settings = settings
        self.logger = logger
        self.queue = EventQueue(
            client: client, retryPolicy: settings.retryPolicy, timeout: settings.batchTimeout, enforce: settings.enforce, logger: logger)
    }

    public func run() async throws {
        // One coalescing stream per loop: a wake-up that arrives mid-batch is kept, many become one.
        let streams = (0..<settings.concurrency).map { _ in AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1)) }
        wakers.withLock { $0 = streams.map(\.continuation) }
        wakeAll()  // work left over from before the start
        ServiceMetrics.enforcement(settings.enforce)
        logger.info(
            "Worker started",
            metadata: ["loops": "\(settings.concurrency)", "batch": "\(settings.batchSize)", "mode": "\(settings.enforce ? "enforce" : "shadow")"])

        // Not a child task: a LISTEN on a connection that died with its server may not notice cancellation, and
        // shutdown must not wait for it. It is cancelled when the loops are done.
        let listener = Task { await self.listenForNotifications() }
        defer { listener.cancel() }
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await self.poll() }
                group.addTask { await EventRetention(client: self.client, settings: self.settings.retention, logger: self.logger).run() }
                await withTaskGroup(of: Void.self) { loops in
                    for stream in streams { loops.addTask { await self.workLoop(stream.stream) } }
                }
                group.cancelAll()
            }
        } onGracefulShutdown: {
            // Ends the loops' streams: each finishes its current batch, then returns.
            self.wakers.withLock { wakers in
                for waker in wakers { waker.finish() }
            }
        }
        logger.info("Worker stopped")
    }

    private func wakeAll() {
        wakers.withLock { wakers in
            for waker in wakers { waker.yield() }
        }
    }

    private func workLoop(_ wakeUps: AsyncStream<Void>) async {
        for await _ in wakeUps {
            if Task.isShuttingDownGracefully { return }
            // Drain: a full batch means there is probably more. A graceful shutdown ends it after this batch.
            while !Task.isCancelled && !Task.isShuttingDownGracefully {
                do {
                    let started = ContinuousClock.now
                    let (queue, limit) = (self.queue, settings.batchSize)
                    let result = try await withTimeout(settings.batchTimeout) { try await queue.processBatch(limit: limit) }
                    if result.claimed > 0 {
                        ServiceMetrics.batchDuration(ContinuousClock.now - started)
                        ServiceMetrics.eventsProcessed(result.done, outcome: "done")
                        ServiceMetrics.eventsProcessed(result.retried, outcome: "retried")
                        ServiceMetrics.eventsProcessed(result.dead, outcome: "dead")
                        ServiceMetrics.actionsApplied(result.totals, enforced: settings.enforce)
                        if settings.enforce { settings.outboxSignal?.committed(result.totals) }
                        logger.debug("Processed a batch", metadata: ["done": "\(result.done)", "failed": "\(result.failed)"])
                    }
                    if result.claimed < settings.batchSize { break }
                } catch {
                    logger.warning("The worker could not process a batch; will retry", metadata: ["error": "\(DatabaseErrors.describe(error))"])
                    try? await Task.sleep(for: .seconds(1))
                    break
                }
            }
        }
    }

    private func poll() async {
        while !Task.isCancelled {
            do { try await Task.sleep(for: settings.pollInterval) } catch { return }
            wakeAll()
        }
    }

    private func listenForNotifications() async {
        await PostgresListener(client: client, channel: Self.channel, logger: logger).run { self.wakeAll() }
    }
}
