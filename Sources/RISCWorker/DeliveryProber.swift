import Foundation
import Logging
import PostgresNIO
import RISC
import RISCKeys
import RISCMetrics
import RISCStore
import ServiceLifecycle

/// Checks, every interval, that Google's deliveries reach this service end to end: reads the stream
/// and its status from the management API, asks for a verification SET with a fresh `state`, and waits for it
/// to arrive through `POST /risc/events` (a trigger records the arrival) or the interval to pass.
/// Exactly one instance probes: the one holding a session advisory lock. Each instance asks for it on a
/// connection of its own, outside the pool, so the lock lives exactly as long as that connection: when the
/// instance dies, or the connection fails, the server drops the lock, and another instance takes it at its next
/// try. (On a pooled connection, an unlock that failed would leave the lock on an idle connection of a live
/// process, and nobody would probe.) Every instance refreshes the health metrics from the database.
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

    let client: PostgresClient
    let lockConnection: PostgresConnection.Configuration
    let management: RISCManagement
    let settings: Settings
    let logger: Logger
    let probes: DeliveryProbes
    let startedAt = Date()

    /// `lockConnection`: the database, for the one connection outside the pool that asks for the lock and probes.
    public init(
        client: PostgresClient, lockConnection: PostgresConnection.Configuration, management: RISCManagement, settings: Settings,
        logger: Logger
    ) {
        self.client = client
        self.lockConnection = lockConnection
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
                            try await self.leadWhenPossible(pause: pause)
                        } catch {
                            if Task.isCancelled { return }
                            self.logger.warning(
                                "The delivery prober lost its database connection; will retry",
                                metadata: ["error": "\(DatabaseErrors.describe(error))"])
                        }
                        try? await Task.sleep(for: pause)
                    }
                }
            }
        }
        logger.info("Delivery prober stopped")
    }

    /// Opens the prober's own connection and asks for the lock on it every `pause`; once it has the lock, probes
    /// every interval until this task ends or the connection fails. Closing the connection hands the lock on.
    private func leadWhenPossible(pause: Duration) async throws {
        let connection = try await PostgresConnection.connect(configuration: lockConnection, id: 0, logger: DatabaseURL.poolLogger(logger))
        do {
            try await whileOpen(connection) { try await self.lead(on: connection, pause: pause) }
        } catch {
            try? await connection.close()
            throw error
        }
        try? await connection.close()
    }

    /// Asks for the lock every `pause` until this instance has it, then probes every interval.
    private func lead(on connection: PostgresConnection, pause: Duration) async throws {
        // Should this host vanish without closing the connection (a crash, a partition), the server notices within
        // about 30 s and drops the lock (the connection's TCP keepalives, `DatabaseURL.connectionConfiguration`),
        // rather than after the operating system's two hours of TCP silence.
        while try await !takeLock(on: connection) { try await Task.sleep(for: pause) }
        logger.info("This instance now probes delivery")
        while !Task.isCancelled {
            let started = ContinuousClock.now
            // Bounded: on a connection whose server went silent, a query would wait for TCP to give up.
            try await withTimeout(settings.interval + .seconds(30)) {
                try await self.probe(on: connection)
                try await self.probes.deleteOld(on: connection)
            }
            try await waitForNextProbe(until: started + settings.interval, on: connection)
        }
    }

    /// Sleeps until `next`, or until someone changes the stream (`stream update|enable|disable` records it): then
    /// at once, so `stream health` does not repeat the previous stream's view for up to a whole interval.
    private func waitForNextProbe(until next: ContinuousClock.Instant, on connection: PostgresConnection) async throws {
        while ContinuousClock.now < next {
            if try await withTimeout(.seconds(30), { try await self.probes.streamChangedSinceLastProbe(on: connection) }) {
                logger.info("The stream was changed since the last probe; probing now")
                return
            }
            try await Task.sleep(until: min(next, .now + Self.changeCheckPause))
        }
    }

    /// How often the leader looks for a stream change between probes.
    static let changeCheckPause: Duration = .seconds(1)

    private func takeLock(on connection: PostgresConnection) async throws -> Bool {
        for try await taken in try await connection.query(
            "SELECT pg_try_advisory_lock(\(AdvisoryLock.singletonClass), \(AdvisoryLock.deliveryProbe.rawValue))", logger: logger
        ).decode(Bool.self) {
            return taken
        }
        return false
    }

    /// One probe; it waits at most one interval for the SET.
    func probe(on connection: PostgresConnection) async throws {
        var report = DeliveryProbes.Report()
        let streamReadAt = try await probes.clock(on: connection)
        do {
            let stream = try await management.stream()
            report.deliveryURL = stream["delivery"]?["url"]?.stringValue
            report.eventTypes = stream["events_requested"]?.arrayValue?.compactMap(\.stringValue) ?? []
            report.streamEnabled = try await management.status()["status"]?.stringValue == "enabled"
        } catch {
            report.error = error.description
        }
        // Cancelled (the connection closed, or shutdown) during a call above: write nothing more on this connection.
        try Task.checkCancellation()
        let state = "risc-probe-" + Base64URL.random(bytes: 16)
        try await probes.start(state: state, proberStartedAt: startedAt, streamReadAt: streamReadAt, report: report, on: connection)
        let requested = ContinuousClock.now
        // Asked for even while the stream is disabled: then it counts as a timeout.
        do {
            try await management.verify(state: state)
        } catch {
            try Task.checkCancellation()
            try await probes.recordError(state: state, "verification not requested: \(error.description)", on: connection)
        }
        let deadline = requested + settings.interval
        var nextChangeCheck = ContinuousClock.now + Self.changeCheckPause
        while ContinuousClock.now < deadline {
            if let seconds = try await probes.roundTrip(state: state, on: connection) {
                logger.debug("Verification SET arrived", metadata: ["round_trip_seconds": "\(seconds)"])
                return
            }
            // A stream changed meanwhile (`stream update` after a probe that found none) makes this probe moot:
            // it ends, neither arrived nor timed out, and the next one starts at once.
            if ContinuousClock.now >= nextChangeCheck {
                if try await probes.streamChangedSinceLastProbe(on: connection) { return }
                nextChangeCheck = ContinuousClock.now + Self.changeCheckPause
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        try await probes.markTimedOut(state: state, on: connection)
        ServiceMetrics.deliveryProbeTimedOut()
        logger.warning(
            "No verification SET arrived within the interval: deliveries may not be reaching this service", metadata: ["state": "\(state)"])
    }

    private func refreshMetrics() async {
        guard let facts = try? await probes.facts(client: client) else { return }
        let health = DeliveryHealth(facts: facts, now: Date(), interval: settings.intervalSeconds, deliveryURL: settings.deliveryURL)
        ServiceMetrics.deliveryHealth(
            healthy: health.healthy, lastVerified: facts.lastVerifiedAt, roundTripSeconds: facts.roundTripSeconds, streamEnabled: facts.streamEnabled)
    }
}
