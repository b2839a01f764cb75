import Logging
import PostgresNIO
import RISC
import RISCMetrics
import RISCStore

/// Sweeps what the retention no longer keeps (RISC_EVENT_RETENTION_DAYS; `RetentionStore` says what goes), every
/// `interval`: small batches with a pause after each, so ingest never waits on a long delete.
public struct EventRetention: Sendable {
    public struct Settings: Sendable {
        /// 0 keeps everything.
        public var days = 400
        public var batchSize = 1_000
        /// Between two batches of one sweep.
        public var pause: Duration = .milliseconds(100)
        /// Between sweeps.
        public var interval: Duration = .seconds(600)
        public init() {}
    }

    let store: RetentionStore
    let settings: Settings
    let logger: Logger

    public init(client: PostgresClient, settings: Settings, logger: Logger) {
        self.store = RetentionStore(client: client, days: settings.days, batchSize: settings.batchSize, logger: logger)
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
            let deleted = try await store.deleteEventBatch()
            total += deleted
            ServiceMetrics.eventsDeleted(deleted)
            if deleted < settings.batchSize { break }
            try await Task.sleep(for: settings.pause)
        }
        while !Task.isCancelled {
            if try await store.deleteNotificationBatch() < settings.batchSize { break }
            try await Task.sleep(for: settings.pause)
        }
        return total
    }
}
