import Foundation
import Logging
import PostgresNIO
import RISC
import RISCKeys
import RISCMetrics
import RISCStore
import ServiceLifecycle

/// Checks, every interval, that Google's deliveries reach this service end to end (SPEC §9): reads the stream
/// and its status from the management API, asks for a verification SET with a fresh `state`, and waits for it
/// to arrive through `POST /risc/events` (a trigger records the arrival) or the interval to pass.
/// Exactly one instance probes: the one holding a session advisory lock, on a connection it keeps for as long as
/// it leads. When it dies its connection closes, the lock goes with it, and another instance takes it at its
/// next try. Every instance refreshes the health metrics from the database.
public final class DeliveryProber: Service, Sendable {
    public struct Settings: Sendable {
        public var interval: Duration
        /// RISC_DELIVERY_URL: where Google should deliver.
        public var deliveryURL: String
        /// How often an instance that does not lead tries to.
        public var followerRetry: Duration = .seconds(10)

        public init(interval: Duration, deliveryURL: String) {
            self.interval = interval
            self.deliveryURL = deliveryURL
        }

        var intervalSeconds: Double { Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18 }
    }

    /// The advisory lock's key: "risc-delivery-probe" hashed by PostgreSQL, the same in every instance.
    static let lockKey = "risc-delivery-probe"

    let client: PostgresClient
    let management: RISCManagement
    let settings: Settings
    let logger: Logger
    let probes: DeliveryProbes
    let startedAt = Date()

    public init(client: PostgresClient, management: RISCManagement, settings: Settings, logger: Logger) {
        self.client = client
        self.management = management
        self.settings = settings
        self.logger = logger
        self.probes = DeliveryProbes(logger: logger)
    }

    public func run() async throws {
        logger.info("Delivery prober started", metadata: ["interval_seconds": "\(settings.intervalSeconds)"])
        let pause = min(settings.interval, settings.followerRetry)
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                // The gauges follow the database between probes too: "no verification within 2 intervals" becomes
                // true with time alone.
                group.addTask {
                    while !Task.isCancelled {
                        await self.refreshMetrics()
                        try? await Task.sleep(for: pause)
                    }
                }
                group.addTask {
                    while !Task.isCancelled {
                        do {
                            try await self.leadWhilePossible()
                        } catch {
                            if Task.isCancelled { return }
                            self.logger.warning(
                                "The delivery prober lost its database connection; will retry", metadata: ["error": "\(DatabaseErrors.describe(error))"])
                        }
                        try? await Task.sleep(for: pause)
                    }
                }
            }
        }
        logger.info("Delivery prober stopped")
    }

    /// Takes the lock if no other instance holds it, then probes every interval on that connection until this
    /// task ends; it hands the lock back before the connection returns to the pool.
    private func leadWhilePossible() async throws {
        try await client.withConnection { connection in
            var leading = false
            for try await taken in try await connection.query("SELECT pg_try_advisory_lock(hashtext(\(Self.lockKey)))", logger: logger).decode(Bool.self) {
                leading = taken
            }
            guard leading else { return }
            logger.info("This instance now probes delivery")
            do {
                while !Task.isCancelled {
                    let started = ContinuousClock.now
                    try await probe(on: connection)
                    let next = started + settings.interval
                    if ContinuousClock.now < next { try await Task.sleep(until: next) }
                }
            } catch {
                _ = try? await connection.query("SELECT pg_advisory_unlock(hashtext(\(Self.lockKey)))", logger: logger)
                throw error
            }
            _ = try? await connection.query("SELECT pg_advisory_unlock(hashtext(\(Self.lockKey)))", logger: logger)
        }
    }

    /// One probe; it waits at most one interval for the SET.
    func probe(on connection: PostgresConnection) async throws {
        var report = DeliveryProbes.Report()
        do {
            let stream = try await management.stream()
            report.deliveryURL = stream["delivery"]?["url"]?.stringValue
            report.eventTypes = stream["events_requested"]?.arrayValue?.compactMap(\.stringValue) ?? []
            report.streamEnabled = try await management.status()["status"]?.stringValue == "enabled"
        } catch {
            report.error = error.description
        }
        let state = "risc-probe-" + Base64URL.random(bytes: 16)
        try await probes.start(state: state, proberStartedAt: startedAt, report: report, on: connection)
        let requested = ContinuousClock.now
        // Asked for even while the stream is disabled: then it counts as a timeout.
        do {
            try await management.verify(state: state)
        } catch {
            try await probes.recordError(state: state, "verification not requested: \(error.description)", on: connection)
        }
        let deadline = requested + settings.interval
        while ContinuousClock.now < deadline {
            if let seconds = try await probes.roundTrip(state: state, on: connection) {
                logger.debug("Verification SET arrived", metadata: ["round_trip_seconds": "\(seconds)"])
                return
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        try await probes.markTimedOut(state: state, on: connection)
        ServiceMetrics.deliveryProbeTimedOut()
        logger.warning("No verification SET arrived within the interval: deliveries may not be reaching this service", metadata: ["state": "\(state)"])
    }

    private func refreshMetrics() async {
        guard let facts = try? await probes.facts(client: client) else { return }
        let health = DeliveryHealth(facts: facts, now: Date(), interval: settings.intervalSeconds, deliveryURL: settings.deliveryURL)
        ServiceMetrics.deliveryHealth(
            healthy: health.healthy, lastVerified: facts.lastVerifiedAt, roundTripSeconds: facts.roundTripSeconds, streamEnabled: facts.streamEnabled)
    }
}
