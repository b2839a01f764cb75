import Logging
import PostgresNIO
import RISC
import RISCMetrics
import RISCStore

/// Deletes `done` and `ignored` events received more than the retention ago, with their actions
/// (RISC_EVENT_RETENTION_DAYS), and delivered notifications written more than the retention ago (pending and dead
/// ones stay, to be delivered or replayed). Small batches, each its own short transaction with a pause after it, so ingest
/// never waits on a long delete; the rows are old, so nothing new is ever locked. Of many workers, one
/// deletes at a time (a transaction-level advisory lock); the others skip that round.
///
/// A redelivery is recognised by its stored (`iss`, `jti`), so the retention must outlast Google's retries:
/// the configuration refuses less than `Settings.minimumDays`.
public struct EventRetention: Sendable {
    public struct Settings: Sendable {
        /// 0 keeps everything.
        public var days = 400
        public var batchSize = 1_000
        /// Between two batches of one sweep.
        public var pause: Duration = .milliseconds(100)
        /// Between sweeps.
        public var interval: Duration = .seconds(600)
        /// Google publishes no retry schedule; its retries end long before this.
        public static let minimumDays = 30
        public init() {}
    }

    let client: PostgresClient
    let settings: Settings
    let logger: Logger

    public init(client: PostgresClient, settings: Settings, logger: Logger) {
        self.client = client
        self.settings = settings
        self.logger = logger
    }

    /// Sweeps every `interval` until cancelled.
    public func run() async {
        guard settings.days > 0 else { return }
        while !Task.isCancelled {
            do {
                let deleted = try await sweep()
                if deleted > 0 { logger.info("Deleted events past the retention", metadata: ["events": "\(deleted)", "days": "\(settings.days)"]) }
            } catch {
                if Task.isCancelled { return }
                logger.warning("Could not delete events past the retention; will try again", metadata: ["error": "\(DatabaseErrors.describe(error))"])
            }
            do { try await Task.sleep(for: settings.interval) } catch { return }
        }
    }

    /// Deletes batches until one comes back short, events first, then notifications; returns how many events
    /// were deleted.
    @discardableResult
    public func sweep() async throws -> Int {
        var total = 0
        while !Task.isCancelled {
            let deleted = try await deleteBatch()
            total += deleted
            ServiceMetrics.eventsDeleted(deleted)
            if deleted < settings.batchSize { break }
            try await Task.sleep(for: settings.pause)
        }
        while !Task.isCancelled {
            if try await deleteNotificationBatch() < settings.batchSize { break }
            try await Task.sleep(for: settings.pause)
        }
        return total
    }

    /// In a transaction holding the retention lock; 0 when another worker holds it.
    private func withRetentionLock(_ body: @escaping @Sendable (PostgresConnection) async throws -> Int) async throws -> Int {
        // Bounded as a worker's batch is: on a connection gone silent, the connection is closed, not kept.
        try await client.transaction(timeout: .seconds(30), logger: logger) { connection in
            var locked = false
            for try await granted in try await connection.query(
                "SELECT pg_try_advisory_xact_lock(hashtext('risc_event_retention'))", logger: logger
            ).decode(Bool.self) { locked = granted }
            guard locked else { return 0 }
            return try await body(connection)
        }
    }

    /// One batch of delivered notifications written more than the retention ago (the BRIN index on created_at).
    func deleteNotificationBatch() async throws -> Int {
        try await withRetentionLock { connection in
            var deleted = 0
            for try await count in try await connection.query(
                """
                WITH old AS (
                    SELECT id FROM risc_notifications
                    WHERE created_at < now() - make_interval(days => \(settings.days)::int4) AND status = \(NotificationStatus.delivered)
                    LIMIT \(settings.batchSize) FOR UPDATE SKIP LOCKED
                ), gone AS (DELETE FROM risc_notifications n USING old WHERE n.id = old.id RETURNING 1)
                SELECT count(*)::int8 FROM gone
                """, logger: logger
            ).decode(Int64.self) { deleted = Int(count) }
            return deleted
        }
    }

    /// One batch: its events' actions, then the events. 0 when another worker holds the retention lock.
    func deleteBatch() async throws -> Int {
        try await withRetentionLock { connection in
            var ids: [Int64] = []
            // The BRIN index on received_at keeps this to the old part of the table.
            let rows = try await connection.query(
                """
                SELECT id FROM risc_events
                WHERE received_at < now() - make_interval(days => \(settings.days)::int4) AND status = ANY(\(EventStatus.finished))
                LIMIT \(settings.batchSize) FOR UPDATE SKIP LOCKED
                """, logger: logger)
            for try await id in rows.decode(Int64.self) { ids.append(id) }
            guard !ids.isEmpty else { return 0 }
            try await connection.query("DELETE FROM risc_event_actions WHERE event_id = ANY(\(ids))", logger: logger)
            try await connection.query("DELETE FROM risc_events WHERE id = ANY(\(ids))", logger: logger)
            return ids.count
        }
    }
}
