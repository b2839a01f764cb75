import Logging
import PostgresNIO
import RISC
import RISCConfiguration
import RISCKeys
import RISCStore
import ServiceLifecycle

/// The background work, built from the configuration in one place: `serve` (unless --no-worker), `worker`, and
/// the tests. The worker applies waiting events and sweeps the retention; the dispatcher delivers the
/// notifications of actions; the delivery prober (serve only) checks that Google's deliveries arrive.
public struct BackgroundServices: Sendable {
    public var worker = EventWorker.Settings()
    public var dispatcher = NotificationDispatcher.Settings()
    /// Nil: no delivery probe (RISC_VERIFY_INTERVAL 0, or a process that does not serve).
    public var probe: DeliveryProber.Settings?
    /// The worker's commits wake the dispatcher through it, and so should the inbox's (`serve`).
    public let outboxSignal = OutboxSignal()

    public init(_ configuration: WorkerConfiguration) {
        worker.retryPolicy = RetryPolicy(maxAttempts: configuration.maxAttempts)
        worker.enforce = configuration.enforce
        worker.retention.days = configuration.eventRetentionDays
        dispatcher.retryPolicy = RetryPolicy(
            maxAttempts: configuration.notifyMaxAttempts, baseDelay: configuration.notifyBackoffBaseSeconds,
            maxDelay: NotificationDispatcher.Settings.longestBackoffSeconds)
        dispatcher.configuredSubscribers = configuration.subscribers
        dispatcher.cipher = configuration.cipher
        worker.outboxSignal = outboxSignal
        dispatcher.outboxSignal = outboxSignal
    }

    /// `serve`'s: the worker's part, and the delivery probe when RISC_VERIFY_INTERVAL and RISC_DELIVERY_URL set one.
    public init(_ configuration: ServiceConfiguration) {
        self.init(configuration.worker)
        if configuration.verifyIntervalSeconds > 0, let deliveryURL = configuration.deliveryURL {
            probe = .init(interval: .milliseconds(Int64(configuration.verifyIntervalSeconds * 1000)), deliveryURL: deliveryURL)
        }
    }

    public func makeWorker(client: PostgresClient, logger: Logger = Logger(label: "risc-receiver.worker")) -> EventWorker {
        EventWorker(client: client, settings: worker, logger: logger)
    }

    public func makeDispatcher(
        client: PostgresClient, logger: Logger = Logger(label: "risc-receiver.notifications")
    ) -> NotificationDispatcher {
        NotificationDispatcher(client: client, settings: dispatcher, logger: logger)
    }

    /// Nil without probe settings. The prober holds its leadership lock on a connection of its own (`databaseURL`).
    public func makeProber(
        client: PostgresClient, databaseURL: String, management: RISCManagement,
        logger: Logger = Logger(label: "risc-receiver.delivery-probe")
    ) throws -> DeliveryProber? {
        guard let probe else { return nil }
        return DeliveryProber(
            client: client, lockConnection: try DatabaseURL.connectionConfiguration(from: databaseURL), management: management,
            settings: probe, logger: logger)
    }
}
