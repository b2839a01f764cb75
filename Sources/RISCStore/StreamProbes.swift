import Foundation
import Logging
import PostgresNIO
import RISC

/// The delivery probes of Shared Signals streams (RISC_VERIFY_INTERVAL): which stream is due, what each probe found,
/// and the facts `streams health` judges. The verifications themselves are the transmitter store's
/// (`risc_stream_verifications`), marked as a probe's.
public struct StreamProbes: Sendable {
    let client: PostgresClient
    let timeout: Duration
    let logger: Logger

    public init(client: PostgresClient, timeout: Duration = .seconds(5), logger: Logger) {
        (self.client, self.timeout, self.logger) = (client, timeout, logger)
    }

    /// On the transmitter store's database, with its bound.
    public init(store: TransmitterStore) {
        self.init(client: store.client, timeout: store.timeout, logger: store.logger)
    }

    /// How long a probe's record is kept (the latest arrival is kept whatever its age).
    public static let retentionDays = 7
    static let maxErrorLength = 1000

    /// The streams whose probe is due, each claimed for this instance: its `health_probed_at` moves to now, so no
    /// other instance probes it again within `interval`.
    public func claimDue(interval: Duration) async throws -> [TransmitterName] {
        let seconds = Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18
        return try await client.withConnection(timeout: timeout) { connection in
            try await connection.values(
                """
                UPDATE risc_transmitters SET health_probed_at = now()
                 WHERE stream_id IS NOT NULL
                   AND (health_probed_at IS NULL OR health_probed_at <= now() - make_interval(secs => \(seconds)))
                RETURNING name
                """, as: String.self, logger: logger
            ).compactMap { try? TransmitterName(naming: $0) }
        }
    }

    /// A probe's verification state: recorded before it is asked for, as the event may arrive before the answer.
    public func requestVerification(of name: TransmitterName, state: String) async throws {
        try await client.withConnection(timeout: timeout) { connection in
            _ = try await connection.query(
                "INSERT INTO risc_stream_verifications (transmitter, state, probe) VALUES (\(name.value), \(state), true)", logger: logger)
        }
    }

    /// What the probe read of the stream; and the probes older than an interval whose event never came are timed out.
    public func recordProbe(of name: TransmitterName, endpointURL: String?, error: String?, interval: Duration) async throws {
        let seconds = Double(interval.components.seconds) + Double(interval.components.attoseconds) / 1e18
        try await client.withConnection(timeout: timeout) { connection in
            _ = try await connection.query(
                """
                UPDATE risc_transmitters SET health_endpoint_url = \(endpointURL), health_error = \(error.map { String($0.prefix(Self.maxErrorLength)) })
                 WHERE name = \(name.value)
                """, logger: logger)
            _ = try await connection.query(
                """
                UPDATE risc_stream_verifications SET timed_out = true
                 WHERE transmitter = \(name.value) AND probe AND NOT timed_out AND arrived_at IS NULL
                   AND requested_at < now() - make_interval(secs => \(seconds))
                """, logger: logger)
            // Old probes go, except the latest arrival: the report names it however old it is.
            _ = try await connection.query(
                """
                DELETE FROM risc_stream_verifications
                 WHERE transmitter = \(name.value) AND probe AND requested_at < now() - make_interval(days => \(Self.retentionDays)::int)
                   AND state <> coalesce((SELECT state FROM risc_stream_verifications WHERE transmitter = \(name.value)
                                            AND arrived_at IS NOT NULL ORDER BY arrived_at DESC LIMIT 1), '')
                """, logger: logger)
        }
    }

    /// What the probes and the transmitter's reports recorded of one stream; nil for no such transmitter.
    public func facts(of name: TransmitterName) async throws -> SharedStreamHealth.Facts? {
        try await client.withConnection(timeout: timeout) { connection in
            var facts: SharedStreamHealth.Facts?
            for try await (hasStream, status, reason, lastArrival, roundTrip, timedOut, probedAt, endpoint, error) in try await connection.query(
                """
                SELECT t.stream_id IS NOT NULL, t.stream_status, t.stream_status_reason, latest.arrived_at,
                       extract(epoch FROM latest.arrived_at - latest.requested_at)::float8,
                       (SELECT count(*) FROM risc_stream_verifications v WHERE v.transmitter = t.name AND v.probe AND v.timed_out)::int8,
                       t.health_probed_at, t.health_endpoint_url, t.health_error
                  FROM risc_transmitters t
                  LEFT JOIN LATERAL (SELECT v.arrived_at, v.requested_at FROM risc_stream_verifications v
                                      WHERE v.transmitter = t.name AND v.arrived_at IS NOT NULL
                                      ORDER BY v.arrived_at DESC LIMIT 1) AS latest ON true
                 WHERE t.name = \(name.value)
                """, logger: logger
            ).decode((Bool, String?, String?, Date?, Double?, Int64, Date?, String?, String?).self) {
                var found = SharedStreamHealth.Facts()
                found.hasStream = hasStream
                found.status = status.flatMap(StreamStatus.State.init(rawValue:))
                found.statusReason = reason
                (found.lastVerifiedAt, found.roundTripSeconds, found.probesTimedOut) = (lastArrival, roundTrip, Int(timedOut))
                (found.lastProbedAt, found.reportedEndpointURL, found.readError) = (probedAt, endpoint, error)
                facts = found
            }
            return facts
        }
    }
}
