import Foundation
import Logging
import PostgresNIO
import RISC

/// The probes' records: what the prober writes, and the facts `stream health` and the
/// metrics read back.
public struct DeliveryProbes: Sendable {
    let logger: Logger

    public init(logger: Logger) {
        self.logger = logger
    }

    /// How long a probe's record is kept (the latest arrival is kept whatever its age).
    public static let retentionDays = 7
    /// The longest error text kept with a probe: Google's error bodies can be large.
    public static let maxErrorLength = 1000

    /// The query behind `facts`: every part reads through an index (migration 0003), as every instance runs it
    /// every few seconds.
    public static let factsSQL = """
        WITH latest AS (SELECT * FROM risc_delivery_probes ORDER BY id DESC LIMIT 1),
             arrived AS (SELECT * FROM risc_delivery_probes WHERE arrived_at IS NOT NULL ORDER BY id DESC LIMIT 1)
        SELECT (SELECT arrived_at FROM arrived),
               (SELECT extract(epoch FROM arrived_at - requested_at)::float8 FROM arrived),
               (SELECT count(*) FROM risc_delivery_probes p, latest
                 WHERE p.timed_out AND p.prober_started_at = latest.prober_started_at)::int8,
               latest.stream_enabled, latest.delivery_url, latest.events_requested, latest.error,
               (SELECT max(changed_at) FROM risc_stream_changes
                 WHERE latest.id IS NULL OR changed_at >= coalesce(latest.stream_read_at, latest.requested_at))
        FROM (SELECT 1) AS one LEFT JOIN latest ON true
        """

    /// What the probes recorded: the last arrival, the last round trip, the timeouts since the latest prober
    /// started (within the retention), and what the management API reported at the latest probe.
    public func facts(on connection: PostgresConnection) async throws -> DeliveryHealth.Facts {
        var facts = DeliveryHealth.Facts()
        let rows = try await connection.query(PostgresQuery(unsafeSQL: Self.factsSQL), logger: logger)
        for try await (lastArrival, roundTrip, timedOut, streamEnabled, deliveryURL, eventTypes, managementError, changedAfter)
            in rows.decode((Date?, Double?, Int64, Bool?, String?, [String]?, String?, Date?).self)
        {
            facts.lastVerifiedAt = lastArrival
            facts.roundTripSeconds = roundTrip
            facts.probesTimedOut = Int(timedOut)
            (facts.streamEnabled, facts.reportedDeliveryURL, facts.reportedEventTypes) = (streamEnabled, deliveryURL, eventTypes)
            facts.managementError = managementError
            facts.streamChangedAfterProbe = changedAfter
        }
        return facts
    }

    public func facts(client: PostgresClient, timeout: Duration = .seconds(5)) async throws -> DeliveryHealth.Facts {
        try await client.withConnection(timeout: timeout) { connection in try await facts(on: connection) }
    }

    /// Whether a verification SET carrying `state` has been stored (`stream verify --wait` polls this).
    public func verificationStored(state: String, client: PostgresClient, timeout: Duration = .seconds(5)) async throws -> Bool {
        let types = [EventType.verification.rawValue, EventType.ssfVerification.rawValue]
        let pattern = JSONValue.array([["state": .string(state)]]).serialized
        return try await client.withConnection(timeout: timeout) { connection in
            let rows = try await connection.query(
                "SELECT 1 FROM risc_events WHERE event_types && \(types) AND events @> \(pattern)::jsonb LIMIT 1", logger: logger)
            for try await _ in rows { return true }
            return false
        }
    }

    /// What the management API reported just before a probe.
    public struct Report: Sendable {
        public var streamEnabled: Bool?
        public var deliveryURL: String?
        public var eventTypes: [String]?
        public var error: String?
        public init() {}
    }

    /// The database's clock, read just before a probe reads the stream: a stream change recorded at or after it
    /// is not reflected in what the probe reports.
    public func clock(on connection: PostgresConnection) async throws -> Date {
        for try await now in try await connection.query("SELECT clock_timestamp()", logger: logger).decode(Date.self) {
            return now
        }
        throw NoClock()
    }

    struct NoClock: Error {}

    public func start(
        state: String, proberStartedAt: Date, streamReadAt: Date, report: Report, on connection: PostgresConnection
    ) async throws {
        try await connection.query(
            """
            INSERT INTO risc_delivery_probes (state, prober_started_at, stream_read_at, stream_enabled, delivery_url, events_requested, error)
            VALUES (\(state), \(proberStartedAt), \(streamReadAt), \(report.streamEnabled), \(report.deliveryURL), \(report.eventTypes),
                    \(report.error.map { String($0.prefix(Self.maxErrorLength)) }))
            """, logger: logger)
    }

    /// Records a change made to the stream (`stream update|enable|disable`): `stream health` then knows the last
    /// probe's view is out of date, and the prober probes again at once.
    public func recordStreamChange(_ change: String, client: PostgresClient, timeout: Duration = .seconds(5)) async throws {
        try await client.withConnection(timeout: timeout) { connection in
            _ = try await connection.query("INSERT INTO risc_stream_changes (change) VALUES (\(change))", logger: logger)
        }
    }

    /// Whether the stream was changed at or after the latest probe read it (or changed while there is no probe).
    public func streamChangedSinceLastProbe(on connection: PostgresConnection) async throws -> Bool {
        let rows = try await connection.query(
            """
            SELECT EXISTS (SELECT 1 FROM risc_stream_changes
                            WHERE changed_at >= coalesce((SELECT coalesce(stream_read_at, requested_at) FROM risc_delivery_probes
                                                           ORDER BY id DESC LIMIT 1), '-infinity'))
            """, logger: logger)
        for try await changed in rows.decode(Bool.self) { return changed }
        return false
    }

    /// Adds to the probe's error (the verification request itself failed), keeping at most `maxErrorLength`.
    public func recordError(state: String, _ error: String, on connection: PostgresConnection) async throws {
        let added = String(error.prefix(Self.maxErrorLength))
        try await connection.query(
            """
            UPDATE risc_delivery_probes SET error = left(coalesce(error || '; ', '') || \(added), \(Self.maxErrorLength)::int)
             WHERE state = \(state)
            """, logger: logger)
    }

    /// Deletes the records older than `retentionDays`, except the latest arrival (`stream health` reports it however
    /// old it is). The leading prober calls it after each probe.
    public func deleteOld(on connection: PostgresConnection) async throws {
        try await connection.query(
            """
            DELETE FROM risc_delivery_probes
             WHERE requested_at < now() - make_interval(days => \(Self.retentionDays)::int)
               AND id <> coalesce((SELECT id FROM risc_delivery_probes WHERE arrived_at IS NOT NULL ORDER BY id DESC LIMIT 1), 0)
            """, logger: logger)
    }

    /// The round trip in seconds once the SET has arrived; nil while it has not.
    public func roundTrip(state: String, on connection: PostgresConnection) async throws -> Double? {
        for try await seconds in try await connection.query(
            "SELECT extract(epoch FROM arrived_at - requested_at)::float8 FROM risc_delivery_probes WHERE state = \(state) AND arrived_at IS NOT NULL",
            logger: logger
        ).decode(Double.self) {
            return seconds
        }
        return nil
    }

    public func markTimedOut(state: String, on connection: PostgresConnection) async throws {
        try await connection.query(
            "UPDATE risc_delivery_probes SET timed_out = true WHERE state = \(state) AND arrived_at IS NULL", logger: logger)
    }
}
