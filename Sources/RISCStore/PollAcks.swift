import Foundation
import Logging
import PostgresNIO
import RISC

/// What the poller of each poll stream owes its transmitter (RFC 8936): acknowledgements of the SETs it stored and the
/// errors of those it refused, durable until a poll carrying them is answered. A crash between a SET's commit and
/// the next poll loses nothing: the next poll, from any instance, sends what is here.
public struct PollAcks: Sendable {
    let client: PostgresClient
    let timeout: Duration
    let logger: Logger

    public init(client: PostgresClient, timeout: Duration = .seconds(5), logger: Logger) {
        (self.client, self.timeout, self.logger) = (client, timeout, logger)
    }

    /// One SET's final outcome: stored (acknowledged), or refused with the error a push would have been answered with.
    public struct Outcome: Sendable, Equatable {
        public var jti: String
        /// Nil: acknowledged.
        public var error: SETRejection?

        public init(jti: String, error: SETRejection? = nil) { (self.jti, self.error) = (jti, error) }
    }

    /// Records outcomes to send with the next poll. An acknowledgement replaces an error still owed for the same jti
    /// (the SET came again, valid, and is stored); an error never replaces an acknowledgement.
    public func record(_ outcomes: [Outcome], for name: TransmitterName) async throws {
        guard !outcomes.isEmpty else { return }
        do {
            try await insert(outcomes, for: name)
        } catch let error as PSQLError where error.isRefusalOfData && outcomes.count > 1 {
            // One outcome's text PostgreSQL cannot hold must not lose the others: one at a time, that one left out.
            for outcome in outcomes { try? await insert([outcome], for: name) }
        }
    }

    private func insert(_ outcomes: [Outcome], for name: TransmitterName) async throws {
        try await client.withConnection(timeout: timeout) { connection in
            _ = try await connection.query(
                """
                INSERT INTO risc_poll_acks AS owed (transmitter, jti, error_code, description)
                SELECT \(name.value), o.jti, NULLIF(o.code, ''), NULLIF(o.description, '')
                  FROM unnest(\(outcomes.map(\.jti))::text[], \(outcomes.map { $0.error?.code.rawValue ?? "" })::text[],
                              \(outcomes.map { $0.error?.text ?? "" })::text[]) AS o(jti, code, description)
                ON CONFLICT (transmitter, jti) DO UPDATE SET error_code = NULL, description = NULL, created_at = now()
                 WHERE EXCLUDED.error_code IS NULL AND owed.error_code IS NOT NULL
                """, logger: logger)
        }
    }

    /// What the next poll sends: the acknowledgements, and the errors by jti.
    public func owed(to name: TransmitterName, limit: Int = 10_000) async throws -> (acks: [String], errors: [String: SETRejection]) {
        try await client.withConnection(timeout: timeout) { connection in
            var acks: [String] = []
            var errors: [String: SETRejection] = [:]
            for try await (jti, code, description) in try await connection.query(
                """
                SELECT jti, error_code, description FROM risc_poll_acks WHERE transmitter = \(name.value)
                 ORDER BY created_at, jti LIMIT \(limit)
                """, logger: logger
            ).decode((String, String?, String?).self) {
                if let code {
                    // A code this version does not know (written by a newer one) is still an error, never an ack.
                    errors[jti] = SETRejection(SETRejection.Code(rawValue: code) ?? .invalidRequest, description ?? "")
                } else {
                    acks.append(jti)
                }
            }
            return (acks, errors)
        }
    }

    /// A poll carrying these was answered: they are sent.
    public func sent(_ jtis: [String], to name: TransmitterName) async throws {
        guard !jtis.isEmpty else { return }
        try await client.withConnection(timeout: timeout) { connection in
            _ = try await connection.query(
                "DELETE FROM risc_poll_acks WHERE transmitter = \(name.value) AND jti = ANY(\(jtis))", logger: logger)
        }
    }

    /// The last poll's time and outcome, for `streams show` and `transmitters show`.
    public func recordPoll(of name: TransmitterName, outcome: String) async throws {
        try await client.withConnection(timeout: timeout) { connection in
            _ = try await connection.query(
                "UPDATE risc_transmitters SET poll_last_at = now(), poll_last_outcome = \(String(outcome.prefix(1000))) WHERE name = \(name.value)",
                logger: logger)
        }
    }
}
