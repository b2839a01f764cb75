import Logging
import PostgresNIO
import RISC

/// Deletes what the retention (RISC_EVENT_RETENTION_DAYS) no longer keeps, one small batch per call, each in its
/// own short transaction: `done` and `ignored` events received more than `days` ago with their actions (but not
/// one last applied in shadow mode: an operator may still replay it, however old), and
/// delivered notifications written more than `days` ago (pending and dead ones stay, to be delivered or
/// replayed). The rows are old, so nothing new is ever locked. Of many workers, one deletes at a time (a
/// transaction-level advisory lock); a batch that finds it taken deletes nothing.
public struct RetentionStore: Sendable {
    let client: PostgresClient
    let days: Int
    let batchSize: Int
    let logger: Logger

    public init(client: PostgresClient, days: Int, batchSize: Int, logger: Logger) {
        self.client = client
        self.days = days
        self.batchSize = batchSize
        self.logger = logger
    }

    /// In a transaction holding the retention lock; 0 when another worker holds it.
    private func withRetentionLock(_ body: @escaping @Sendable (PostgresConnection) async throws -> Int) async throws -> Int {
        // Bounded as a worker's batch is: on a connection gone silent, the connection is closed, not kept.
        try await client.transaction(timeout: .seconds(30), logger: logger) { connection in
            var locked = false
            for try await granted in try await connection.query(
                "SELECT pg_try_advisory_xact_lock(\(AdvisoryLock.singletonClass), \(AdvisoryLock.eventRetention.rawValue))",
                logger: logger
            ).decode(Bool.self) { locked = granted }
            guard locked else { return 0 }
            return try await body(connection)
        }
    }

    /// One batch of old events: their actions, then the events. Returns how many events went.
    public func deleteEventBatch() async throws -> Int {
        try await withRetentionLock { connection in
            // The BRIN index on received_at keeps this to the old part of the table.
            let ids = try await connection.values(
                """
                SELECT id FROM risc_events
                WHERE received_at < now() - make_interval(days => \(days)::int4) AND status = ANY(\(EventStatus.finished))
                  AND NOT shadow
                LIMIT \(batchSize) FOR UPDATE SKIP LOCKED
                """, as: Int64.self, logger: logger)
            guard !ids.isEmpty else { return 0 }
            try await connection.query("DELETE FROM risc_event_actions WHERE event_id = ANY(\(ids))", logger: logger)
            try await connection.query("DELETE FROM risc_events WHERE id = ANY(\(ids))", logger: logger)
            return ids.count
        }
    }

    /// One batch of old delivered notifications (the BRIN index on created_at). Returns how many went.
    public func deleteNotificationBatch() async throws -> Int {
        try await withRetentionLock { connection in
            var deleted = 0
            for try await count in try await connection.query(
                """
                WITH old AS (
                    SELECT id FROM risc_notifications
                    WHERE created_at < now() - make_interval(days => \(days)::int4) AND status = \(NotificationStatus.delivered)
                    LIMIT \(batchSize) FOR UPDATE SKIP LOCKED
                ), gone AS (DELETE FROM risc_notifications n USING old WHERE n.id = old.id RETURNING 1)
                SELECT count(*)::int8 FROM gone
                """, logger: logger
            ).decode(Int64.self) { deleted = Int(count) }
            return deleted
        }
    }
}
