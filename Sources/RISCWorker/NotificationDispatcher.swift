import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import PostgresNIO
import RISC
import RISCMetrics
import RISCStore
import ServiceLifecycle
import Synchronization
import Tracing

/// Delivers the notification outbox to subscribers: Standard Webhooks `POST`s, at least once.
/// Woken by this process's `OutboxSignal` when actions commit here, by `NOTIFY risc_notifications` (an admin's
/// replay), and by a poll (retries coming due, notifications another process committed). Keeps up to `concurrency`
/// deliveries in flight per subscriber, each subscriber with its own connections: a slow or unreachable subscriber
/// holds up only its own notifications. Any number of dispatchers may run, in this process or others, as each takes
/// only what no other holds.
/// Before each delivery the subscriber's host is resolved and every address checked (`IPAddress`); the connection
/// goes to the address checked, so a name that resolves elsewhere a moment later cannot redirect it. A subscriber whose
/// secret cannot be opened (a wrong or missing vault key) is paused, not failed: its notifications wait with their
/// attempts uncounted, reported in the log and a metric, until the key is configured or the secret rotated.
/// On graceful shutdown it takes nothing new and lets the deliveries in flight finish; one cut short is sent again
/// once its lease ends.
/// The outcomes of attempts are recorded together, by the loop, just before it takes more: one statement for many
/// instead of one each, and each outbox row written once, with its outcome (a claim leases the row apart from it).
/// A user's next notification is taken only after that (its order holds); a dispatcher that dies before recording
/// sends those again after their lease (at least once, with the same webhook-id).
public final class NotificationDispatcher: Service, Sendable {
    public struct Settings: Sendable {
        /// After the last attempt a notification is dead (RISC_NOTIFY_MAX_ATTEMPTS), and the delay between
        /// attempts doubles from `backoffBase` seconds (RISC_NOTIFY_BACKOFF_BASE), with jitter, up to an hour.
        public var retryPolicy = RetryPolicy(maxAttempts: 10, baseDelay: 1, maxDelay: longestBackoffSeconds)
        public static let longestBackoffSeconds: Double = 3600
        /// No status line by then is a failed attempt (10 s).
        public var timeout: Duration = .seconds(10)
        /// How long the body after a status line is read (and dropped, so the connection can be reused). The status
        /// line has decided by then: a slow body is cut off, never a failure.
        public var replyBodyTimeout: Duration = .seconds(2)
        /// Deliveries in flight per subscriber. Enough to keep up with ingest at full speed while the dispatcher's loop
        /// waits for the database: it records and claims for a handful at a time, and each round trip takes
        /// milliseconds on a busy database. They share `connectionsPerSubscriber` connections.
        public var concurrency = 64
        /// HTTP connections per subscriber: a delivery beyond them waits for one (within its timeout).
        public var connectionsPerSubscriber = 32
        /// Resolves a subscriber's host name to its addresses (the system's resolver; tests give their own).
        public var resolve: @Sendable (String) async throws -> [IPAddress] = SubscriberAddresses.systemResolve
        public var pollInterval: Duration = .seconds(1)
        /// RISC_VAULT_KEY's: opens the subscribers' sealed secrets; at start, seals any left in clear.
        public var cipher: VaultCipher?
        /// RISC_SUBSCRIBERS: made the configured subscribers before the first delivery; nil leaves them alone.
        public var configuredSubscribers: [NewSubscriber]?
        /// Wakes the dispatcher when this process commits actions that may have written notifications.
        public var outboxSignal: OutboxSignal?
        public init() {}

        /// How long a taken notification is left alone: past the timeout, so only a dispatcher that died mid-delivery
        /// (or its database connection) lets another send it again.
        var lease: Duration { SubscriberAddresses.resolveTimeout + timeout + replyBodyTimeout + .seconds(5) }
    }

    let subscribers: SubscriberStore
    let outbox: NotificationOutbox
    let client: PostgresClient
    let settings: Settings
    let logger: Logger
    /// Deliveries in flight, by subscriber.
    private let inFlight = Mutex<[Int64: Int]>([:])
    private let connections = SubscriberConnections()
    /// Attempts made, not yet recorded.
    private let outcomes = Mutex<[(id: Int64, attempt: Int, outcome: NotificationOutbox.Outcome)]>([])
    private let waker = Mutex<AsyncStream<Void>.Continuation?>(nil)
    /// The ids of the subscribers to deliver to, and when they were read.
    private let subscriberList = Mutex<(ids: [Int64], readAt: ContinuousClock.Instant)?>(nil)
    /// Subscribers paused because their secret cannot be opened here.
    private let paused = Mutex<Set<Int64>>([])

    public init(client: PostgresClient, settings: Settings = .init(), logger: Logger) {
        self.client = client
        self.subscribers = SubscriberStore(client: client, cipher: settings.cipher, logger: logger)
        self.outbox = NotificationOutbox(client: client, cipher: settings.cipher, logger: logger)
        self.settings = settings
        self.logger = logger
    }

    public func run() async throws {
        // No redirects: a subscriber's URL was checked (https, or loopback), where it redirects to was not.
        var configuration = HTTPClient.Configuration(redirectConfiguration: .disallow)
        // The delivery's span is ours (AsyncHTTPClient's would record the URL, which may hold a credential).
        configuration.tracing.tracer = nil
        configuration.timeout = .init(connect: .seconds(Int64(settings.timeout.components.seconds)))
        configuration.connectionPool = .init(idleTimeout: .seconds(60), concurrentHTTP1ConnectionsPerHostSoftLimit: settings.connectionsPerSubscriber)
        if let configured = settings.configuredSubscribers {
            await syncConfiguredSubscribers(configured)
        }
        if settings.cipher != nil { await sealSecrets() }
        connections.configuration = configuration
        let (wakeUps, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        waker.withLock { $0 = continuation }
        continuation.yield()  // notifications left over from before the start
        // Not child tasks: a LISTEN on a dead connection may not notice cancellation (as in EventWorker), and the
        // group below must end when its deliveries do.
        let listener = Task { await PostgresListener(client: client, channel: NotificationOutbox.channel, logger: logger).run { self.wake() } }
        let poller = Task { await self.poll() }
        let signalled = settings.outboxSignal?.add { self.wake() }
        defer { if let signalled { settings.outboxSignal?.remove(signalled) } }
        logger.info("Notification dispatcher started", metadata: ["concurrency": "\(settings.concurrency)"])
        await withGracefulShutdownHandler {
            // Ends after the stream does (graceful shutdown), once the deliveries in flight are done.
            await withDiscardingTaskGroup { group in
                await self.dispatch(wakeUps, group: &group)
            }
            await self.recordOutcomes()
        } onGracefulShutdown: {
            self.waker.withLock { $0?.finish() }
        }
        listener.cancel()
        poller.cancel()
        await connections.shutdown()
        logger.info("Notification dispatcher stopped")
    }

    /// Retries until the database answers (or shutdown): deliveries wait for the configured subscribers.
    private func syncConfiguredSubscribers(_ configured: [NewSubscriber]) async {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                try await subscribers.syncConfigured(configured)
                logger.info("Subscribers from RISC_SUBSCRIBERS are in place", metadata: ["subscribers": "\(configured.count)"])
                return
            } catch {
                logger.warning("Could not apply RISC_SUBSCRIBERS; will retry", metadata: ["error": "\(DatabaseErrors.describe(error))"])
                try? await Task.sleep(for: .seconds(1))
            }
        }
    }

    /// Seals the secrets left in clear (or under an older key); tried once: `vault rotate` does it too.
    private func sealSecrets() async {
        do {
            let sealed = try await subscribers.resealSecrets(rekey: false)
            if sealed > 0 { logger.info("Sealed subscribers' secrets with the current vault key", metadata: ["subscribers": "\(sealed)"]) }
        } catch {
            logger.warning("Could not seal the subscribers' secrets", metadata: ["error": "\(DatabaseErrors.describe(error))"])
        }
    }

    private func wake() {
        _ = waker.withLock { $0?.yield() }
    }

    private func poll() async {
        while !Task.isCancelled {
            do { try await Task.sleep(for: settings.pollInterval) } catch { return }
            wake()
        }
    }

    /// On each wake-up, takes for each subscriber as many due notifications as it has free delivery slots, until
    /// none is due. A finished delivery frees its slot and wakes the loop.
    private func dispatch(_ wakeUps: AsyncStream<Void>, group: inout DiscardingTaskGroup) async {
        for await _ in wakeUps {
            while !Task.isShuttingDownGracefully && !Task.isCancelled {
                var claimedAny = false
                do {
                    let subscribers = try await subscriberIDs()
                    // Taken in handfuls, not one at a time as each delivery ends: a claim, and the record of what
                    // became of the attempts, each cost a transaction (a commit), so they serve several
                    // notifications at once. The outcomes are recorded just before a claim (a user's next
                    // notification is taken only after), or once a handful are waiting, or when nothing is in flight.
                    let claimable = subscribers.filter { subscriber in
                        let busy = inFlight.withLock { $0[subscriber] ?? 0 }
                        let free = settings.concurrency - busy
                        return free > 0 && (busy == 0 || free >= (settings.concurrency + 3) / 4)
                    }
                    let finished = outcomes.withLock { $0.count }
                    if !claimable.isEmpty || finished >= (settings.concurrency + 3) / 4 || inFlight.withLock({ $0.values.reduce(0, +) }) == 0 {
                        await recordOutcomes()
                    }
                    for subscriber in claimable {
                        let busy = inFlight.withLock { $0[subscriber] ?? 0 }
                        let free = settings.concurrency - busy
                        let claimed = try await outbox.claim(subscriber: subscriber, limit: free, lease: settings.lease)
                        guard !claimed.isEmpty else { continue }
                        claimedAny = true
                        inFlight.withLock { $0[subscriber, default: 0] += claimed.count }
                        for delivery in claimed {
                            group.addTask {
                                await self.deliver(delivery)
                                self.inFlight.withLock { $0[subscriber, default: 1] -= 1 }
                                self.wake()
                            }
                        }
                    }
                } catch {
                    logger.warning("Could not take notifications to deliver; will retry", metadata: ["error": "\(DatabaseErrors.describe(error))"])
                    break
                }
                guard claimedAny else { break }
            }
        }
        // Shutting down: the deliveries in flight finish; each is recorded as it does, before its lease can end.
        while inFlight.withLock({ $0.values.reduce(0, +) }) > 0 && !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(100))
            await recordOutcomes()
        }
    }

    /// The subscribers to deliver to, read again at most once per poll interval: not one more query for every
    /// wake-up. Those whose secret cannot be opened are left out (paused) and reported when that starts and ends.
    private func subscriberIDs() async throws -> [Int64] {
        let now = ContinuousClock.now
        if let (ids, readAt) = subscriberList.withLock({ $0 }), now - readAt < settings.pollInterval { return ids }
        let targets = try await subscribers.deliveryTargets()
        connections.keepOnly(Set(targets.map(\.id)))
        let unopenable = Dictionary(uniqueKeysWithValues: targets.compactMap { target in target.secretProblem.map { (target.id, $0) } })
        let (newlyPaused, resumed) = paused.withLock { paused in
            let newlyPaused = unopenable.keys.filter { !paused.contains($0) }
            let resumed = paused.subtracting(unopenable.keys)
            paused = Set(unopenable.keys)
            return (newlyPaused, resumed)
        }
        for id in newlyPaused.sorted() {
            ServiceMetrics.subscriberSecretUnopenable(subscriber: id, true)
            logger.error(
                """
                Deliveries to a subscriber are paused: its secret cannot be opened. Its notifications wait, their attempts \
                uncounted; configure the vault key it was sealed with, or rotate its secret
                """,
                metadata: ["subscriber_id": "\(id)", "error": "\(unopenable[id] ?? "")"])
        }
        let present = Set(targets.map(\.id))
        for id in resumed.sorted() {
            ServiceMetrics.subscriberSecretUnopenable(subscriber: id, false)
            // A removed subscriber is not resumed: it is gone.
            if present.contains(id) { logger.info("Deliveries to a subscriber resume: its secret opens", metadata: ["subscriber_id": "\(id)"]) }
        }
        let ids = targets.filter { $0.secretProblem == nil }.map(\.id)
        subscriberList.withLock { $0 = (ids, now) }
        return ids
    }

    /// Records the attempts finished since the last call, in one statement. Kept for the next call if that fails
    /// (a record is only taken while its attempt holds the lease, so trying again is safe); unrecorded when the
    /// lease ends, they are sent again: at least once.
    private func recordOutcomes() async {
        let finished = outcomes.withLock { outcomes in
            defer { outcomes.removeAll() }
            return outcomes
        }
        guard !finished.isEmpty else { return }
        do {
            try await outbox.record(finished)
        } catch {
            outcomes.withLock { $0.insert(contentsOf: finished, at: 0) }
            logger.warning(
                "Could not record deliveries yet; will try again",
                metadata: ["notifications": "\(finished.count)", "error": "\(DatabaseErrors.describe(error))"])
        }
    }

    /// One attempt: sign, send, record the outcome (a delivery later, with others). Any 2xx is delivered; anything
    /// else, or no answer in time, is retried with backoff or, after the last attempt, dead.
    func deliver(_ delivery: NotificationOutbox.Delivery) async {
        guard TraceContext.isEnabled else { return await deliver(delivery, span: nil) }
        // A client span in the trace of the request that stored the event; the request carries its traceparent, so
        // the subscriber's service continues that trace. Ids and the kind only: never the URL, which may hold a
        // credential, nor the user.
        let parent = TraceContext.context(traceparent: delivery.traceparent) ?? .topLevel
        await withSpan("deliver notification", context: parent, ofKind: .client) { span in
            span.updateAttributes { attributes in
                attributes["http.request.method"] = "POST"
                attributes["risc.notification.id"] = delivery.id
                attributes["risc.subscriber.id"] = delivery.subscriberID
                attributes["risc.event.id"] = delivery.notification.eventID
                attributes["risc.event.jti"] = delivery.notification.jti
                attributes["risc.action.kind"] = delivery.notification.kind
                attributes["risc.delivery.attempt"] = delivery.attempt
            }
            await deliver(delivery, span: span)
        }
    }

    private func deliver(_ delivery: NotificationOutbox.Delivery, span: (any Span)?) async {
        // Made only for a line that is logged: most deliveries log none at the default level.
        func metadata(_ error: String? = nil) -> Logger.Metadata {
            var metadata: Logger.Metadata = [
                "notification_id": "\(delivery.id)", "webhook_id": "\(delivery.webhookID)", "subscriber_id": "\(delivery.subscriberID)",
                "attempt": "\(delivery.attempt)",
            ]
            if let error { metadata["error"] = "\(error)" }
            return metadata
        }
        if let problem = delivery.secretProblem {
            // Taken in the moment its secret changed (the list of subscribers said it opened): not an attempt.
            span?.attributes["risc.delivery.outcome"] = "paused"
            return await release(delivery, problem: problem, metadata: metadata)
        }
        let started = ContinuousClock.now
        var failure: String?
        let http: HTTPClient?
        switch await SubscriberAddresses.check(url: delivery.url, resolve: settings.resolve) {
        case .refused(let reason):
            (http, failure) = (nil, reason)
        case .connect(let host, let addresses):
            http = connections.client(subscriber: delivery.subscriberID, host: host, addresses: addresses)
        }
        // The current secret signs; one rotated out in the last 24 hours signs beside it, so a subscriber still
        // checking with the old one keeps accepting while it changes over.
        let signingKey = delivery.secret.flatMap(StandardWebhook.key(secret:))
        let keys = [signingKey, delivery.previousSecret.flatMap(StandardWebhook.key(secret:))].compactMap { $0 }
        if failure == nil, let http, signingKey != nil {
            let body = Array(delivery.notification.body.serialized.utf8)
            var request = HTTPClientRequest(url: delivery.url)
            request.method = .POST
            request.headers.add(name: "Content-Type", value: "application/json")
            request.headers.add(name: "User-Agent", value: "risc-receiver")
            if let traceparent = TraceContext.traceparent(of: span?.context) { request.headers.add(name: "traceparent", value: traceparent) }
            for (name, value) in StandardWebhook.headers(
                id: delivery.webhookID, timestamp: Int64(Date().timeIntervalSince1970), body: body, keys: keys)
            {
                request.headers.add(name: name, value: value)
            }
            request.body = .bytes(ByteBuffer(bytes: body))
            failure = await send(request, http: http)
        } else if failure == nil {
            failure = "the subscriber's secret is not a whsec_ secret"
        }
        ServiceMetrics.notificationDuration(ContinuousClock.now - started)
        span?.attributes["risc.delivery.outcome"] = failure == nil ? "delivered" : "failed"
        if failure != nil { span?.setStatus(.init(code: .error)) }
        // Recorded by the loop, with others.
        let outcome: NotificationOutbox.Outcome
        if let failure {
            switch settings.retryPolicy.decision(afterFailedAttempts: delivery.attempt, jitter: Double.random(in: 0...1)) {
            case .retry(let seconds):
                outcome = .retry(after: seconds, error: failure)
                ServiceMetrics.notificationsDelivered(1, outcome: "retried")
                logger.info("A notification was not delivered; it will be retried", metadata: metadata(failure))
            case .dead:
                outcome = .dead(error: failure)
                ServiceMetrics.notificationsDelivered(1, outcome: "dead")
                logger.error("A notification failed its last attempt and is dead", metadata: metadata(failure))
            }
        } else {
            outcome = .delivered
            ServiceMetrics.notificationsDelivered(1, outcome: "delivered")
            logger.debug("Notification delivered", metadata: metadata())
        }
        outcomes.withLock { $0.append((delivery.id, delivery.attempt, outcome)) }
    }

    /// Gives a notification back untried: its subscriber's secret cannot be opened, which no retry would change. The
    /// subscriber is paused from the next read of the list.
    private func release(_ delivery: NotificationOutbox.Delivery, problem: String, metadata: (String?) -> Logger.Metadata) async {
        subscriberList.withLock { $0 = nil }
        do {
            try await outbox.release(delivery)
            logger.warning(
                "A notification was not sent: its subscriber's secret cannot be opened", metadata: metadata(problem))
        } catch {
            logger.warning(
                "Could not give back a notification not sent; it is due again after its lease",
                metadata: metadata(DatabaseErrors.describe(error)))
        }
    }

    /// How much of a subscriber's answer is read (and dropped), so that its connection can be reused.
    static let maxReplyBytes = 64 * 1024

    /// Nil when the subscriber's status line was 2xx within the timeout; otherwise why not (never the URL, which may
    /// carry a credential, nor the body). AsyncHTTPClient's deadline bounds the wait for the status line by itself (its
    /// timer ends when the head arrives), so that wait needs no racing task of ours.
    private func send(_ request: HTTPClientRequest, http: HTTPClient) async -> String? {
        let timeout = settings.timeout
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, deadline: .now() + TimeAmount(timeout))
        } catch let error as HTTPClientError where error == .deadlineExceeded {
            return "no answer within \(timeout.components.seconds) s"
        } catch {
            return "cannot deliver: \(String(describing: error).prefix(200))"
        }
        // The status line decides. The body is read and dropped, so that the connection can be reused: at once when
        // HTTP/1.1 says it ended with the head (the usual 204), else under its own bound (one cut off closes the
        // connection). Over HTTP/2 (https) a body ends only when the subscriber ends the stream, which it may never do.
        if Self.endedWithHead(
            httpMajorVersion: response.version.major, status: response.status.code, contentLength: response.headers.first(name: "content-length"))
        {
            _ = try? await response.body.collect(upTo: Self.maxReplyBytes)
        } else {
            _ = try? await withTimeout(settings.replyBodyTimeout) { try await response.body.collect(upTo: Self.maxReplyBytes) }
        }
        return (200..<300).contains(response.status.code) ? nil : "HTTP \(response.status.code)"
    }

    /// An HTTP/1 response with no body: a 204, a 304 or `Content-Length: 0` ends with its head (RFC 9112 §6.3).
    static func endedWithHead(httpMajorVersion: Int, status: UInt, contentLength: String?) -> Bool {
        httpMajorVersion == 1 && (status == 204 || status == 304 || contentLength == "0")
    }
}
