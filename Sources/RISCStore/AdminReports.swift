import Foundation
import Logging
import PostgresNIO
import RISC

/// The operator's read-only reports, for the admin API and the CLI alike: one user's view, the event queue's stats,
/// and its backlog (which the metrics and /readyz read too).
public struct AdminReports: BoundedStore {
    let client: PostgresClient
    let logger: Logger
    /// Each call's bound (RISC_DATABASE_TIMEOUT), the same for the admin API and the CLI.
    let timeout: Duration
    /// The mode `stats` reports: this process's RISC_ENFORCE.
    let mode: EnforcementMode

    public init(client: PostgresClient, timeout: Duration = .seconds(5), mode: EnforcementMode = .enforce, logger: Logger) {
        (self.client, self.timeout, self.mode, self.logger) = (client, timeout, mode, logger)
    }

    /// Everything about one user. Nil when the service has never heard of the sub.
    public func user(sub: String) async throws -> UserReport? {
        try await bounded { connection in
            var report = UserReport(sub: sub, account: nil, flags: [], sessions: .init(), grants: .init(), recentEvents: [])
            for try await (
                email, emailVerified, name, hd, signInDisabled, disabledReason, signInStateAt, reviewRequired,
                credentialChangeRequired, firstSeenAt, lastSignInAt
            ) in try await connection.query(
                """
                SELECT email, email_verified, name, hd, sign_in_disabled, disabled_reason, sign_in_state_at, review_required,
                       credential_change_required, created_at, last_sign_in_at
                FROM risc_users WHERE sub = \(sub)
                """, logger: logger
            ).decode((String?, Bool?, String?, String?, Bool, String?, Date?, Bool, Bool, Date, Date?).self) {
                report.flags =
                    AccountFlags(
                        signInDisabled: signInDisabled, reviewRequired: reviewRequired, credentialChangeRequired: credentialChangeRequired
                    ).names
                report.account = .init(
                    email: email, emailVerified: emailVerified, name: name, hd: hd, signInDisabled: signInDisabled,
                    disabledReason: disabledReason, signInStateAt: signInStateAt, firstSeenAt: firstSeenAt, lastSignInAt: lastSignInAt)
            }
            for try await (active, revoked) in try await connection.query(
                """
                SELECT count(*) FILTER (WHERE revoked_at IS NULL AND expires_at > now())::int8,
                       count(*) FILTER (WHERE revoked_at IS NOT NULL)::int8
                FROM risc_sessions WHERE sub = \(sub)
                """, logger: logger
            ).decode((Int64, Int64).self) {
                report.sessions = .init(active: Int(active), revoked: Int(revoked))
            }
            for try await (active, revoked) in try await connection.query(
                """
                SELECT count(*) FILTER (WHERE revoked_at IS NULL)::int8, count(*) FILTER (WHERE revoked_at IS NOT NULL)::int8
                FROM risc_grants WHERE sub = \(sub)
                """, logger: logger
            ).decode((Int64, Int64).self) {
                report.grants = .init(active: Int(active), revoked: Int(revoked))
            }
            var filter = EventAdmin.Filter()
            filter.sub = sub
            filter.limit = 20
            report.recentEvents = try await EventAdmin(client: client, timeout: timeout, logger: logger).events(filter).events
            let nothing = UserReport.Counts()
            if report.account == nil, report.sessions == nothing, report.grants == nothing, report.recentEvents.isEmpty { return nil }
            return report
        }
    }

    public func stats() async throws -> QueueStats {
        // The backlog first, under the usual bound: a database that is down is reported as soon as by any other call.
        let backlog = try await backlog()
        let shadowEvents = try await bounded { connection in
            // Read from the partial index of shadow events: none at all in enforcing mode.
            var count: Int64 = 0
            for try await value in try await connection.query("SELECT count(*)::int8 FROM risc_events WHERE shadow", logger: logger)
                .decode(Int64.self)
            {
                count = value
            }
            return Int(count)
        }
        // Then every stored event is counted, twice: at ten million events that takes seconds, more than
        // RISC_DATABASE_TIMEOUT, so the counts have a bound of their own, as long as the database answers.
        return try await client.withConnection(timeout: timeout, whileAnswering: max(timeout, Self.countTimeout), logger: logger) {
            connection in
            var byStatus: [EventStatus: Int] = [:]
            for try await (status, count) in try await connection.query(
                "SELECT status, count(*)::int8 FROM risc_events GROUP BY status", logger: logger
            ).decode((EventStatus, Int64).self) {
                byStatus[status] = Int(count)
            }
            var byType: [String: Int] = [:]
            for try await (type, count) in try await connection.query(
                "SELECT t, count(*)::int8 FROM risc_events, unnest(event_types) AS t GROUP BY t", logger: logger
            ).decode((String, Int64).self) {
                byType[EventType(rawValue: type)?.shortName ?? type] = Int(count)
            }
            return QueueStats(byStatus: byStatus, byType: byType, backlog: backlog, mode: mode, shadowEvents: shadowEvents)
        }
    }

    /// The bound of `stats`'s counts of every stored event.
    public static let countTimeout: Duration = .seconds(60)

    /// How many events wait for a worker, and the age of the oldest: for `stats` and the metrics.
    public func backlog() async throws -> Backlog {
        try await bounded { connection in
            var backlog = Backlog()
            for try await (depth, age) in try await connection.query(
                """
                SELECT count(*)::int8, extract(epoch FROM now() - min(received_at))::float8
                FROM risc_events WHERE status = ANY(\(EventStatus.waiting))
                """, logger: logger
            ).decode((Int64, Double?).self) {
                backlog = Backlog(depth: Int(depth), oldestAgeSeconds: age)
            }
            return backlog
        }
    }

}
