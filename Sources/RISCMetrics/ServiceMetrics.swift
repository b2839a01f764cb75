import Foundation
import Metrics

/// Every metric the service records, named once (Prometheus conventions: snake_case, a `risc_` prefix,
/// `_total` for counters, base units in the name). Recorded through swift-metrics; the executable
/// bootstraps the Prometheus backend that `GET /metrics` exposes.
public enum ServiceMetrics {
    /// One SET answered: its event type (short name) and the outcome (`accepted`, `duplicate`, or the error).
    public static func setReceived(eventType: String, outcome: String) {
        Counter(label: "risc_sets_received_total", dimensions: [("event_type", eventType), ("outcome", outcome)]).increment()
    }

    /// From the request's arrival to its answer (202 only after the commit).
    public static func ingestDuration(_ duration: Duration, outcome: String) {
        Timer(label: "risc_ingest_duration_seconds", dimensions: [("outcome", outcome)], preferredDisplayUnit: .seconds)
            .recordNanoseconds(duration.nanoseconds)
    }

    /// Events finished by a worker: `done`, `retried` or `dead`.
    public static func eventsProcessed(_ count: Int, outcome: String) {
        guard count > 0 else { return }
        Counter(label: "risc_worker_events_total", dimensions: [("outcome", outcome)]).increment(by: count)
    }

    /// Events deleted with their actions after RISC_EVENT_RETENTION_DAYS.
    public static func eventsDeleted(_ count: Int) {
        guard count > 0 else { return }
        Counter(label: "risc_events_deleted_total").increment(by: count)
    }

    public static func batchDuration(_ duration: Duration) {
        Timer(label: "risc_worker_batch_duration_seconds", preferredDisplayUnit: .seconds).recordNanoseconds(duration.nanoseconds)
    }

    /// The age of the oldest event still waiting for a worker (0 when none is).
    public static func workerLag(seconds: Double) {
        Gauge(label: "risc_worker_lag_seconds").record(seconds)
    }

    public static func queueDepth(_ count: Int) {
        Gauge(label: "risc_worker_queue_depth").record(count)
    }

    /// How many of the inbox's batches may commit at once, as it adapts.
    public static func inboxBatchesAllowed(_ count: Int) {
        Gauge(label: "risc_inbox_batches_allowed").record(count)
    }

    /// A discovery document + JWKS fetch for `issuer` (`risc` or `openid`): `success` or `failure`.
    public static func keysFetched(issuer: String, outcome: String) {
        Counter(label: "risc_jwks_fetches_total", dimensions: [("issuer", issuer), ("outcome", outcome)]).increment()
    }

    /// What applied actions changed, whichever path applied them (on receipt or a worker): sessions revoked,
    /// grants deleted, and token-revoked identifiers that matched several grants (all were erased).
    public static func actionsApplied(sessionsRevoked: Int, grantsDeleted: Int, ambiguousTokenIdentifiers: Int) {
        if sessionsRevoked > 0 { Counter(label: "risc_sessions_revoked_total").increment(by: sessionsRevoked) }
        if grantsDeleted > 0 { Counter(label: "risc_grants_deleted_total").increment(by: grantsDeleted) }
        if ambiguousTokenIdentifiers > 0 {
            Counter(label: "risc_token_identifiers_ambiguous_total").increment(by: ambiguousTokenIdentifiers)
        }
    }

    /// What shadow actions would have changed (RISC_ENFORCE=false): the same figures, under their own names.
    public static func shadowActionsRecorded(sessionsRevoked: Int, grantsDeleted: Int, ambiguousTokenIdentifiers: Int) {
        if sessionsRevoked > 0 { Counter(label: "risc_shadow_sessions_revoked_total").increment(by: sessionsRevoked) }
        if grantsDeleted > 0 { Counter(label: "risc_shadow_grants_deleted_total").increment(by: grantsDeleted) }
        if ambiguousTokenIdentifiers > 0 {
            Counter(label: "risc_shadow_token_identifiers_ambiguous_total").increment(by: ambiguousTokenIdentifiers)
        }
    }

    /// 1 when actions are enforced, 0 in shadow mode.
    public static func enforcement(_ enforced: Bool) {
        Gauge(label: "risc_enforce").record(enforced ? 1 : 0)
    }

    /// Notification delivery attempts to subscribers: `delivered`, `retried` or `dead`.
    public static func notificationsDelivered(_ count: Int, outcome: String) {
        Counter(label: "risc_notifications_total", dimensions: [("outcome", outcome)]).increment(by: count)
    }

    /// 1 while a subscriber's deliveries are paused because its secret cannot be opened with the vault keys this
    /// dispatcher has (a wrong or missing RISC_VAULT_KEY), 0 once they resume.
    public static func subscriberSecretUnopenable(subscriber: Int64, _ unopenable: Bool) {
        Gauge(label: "risc_subscriber_secret_unopenable", dimensions: [("subscriber", String(subscriber))]).record(unopenable ? 1 : 0)
    }

    /// One delivery attempt, from sending to the subscriber's answer (or the timeout).
    public static func notificationDuration(_ duration: Duration) {
        Timer(label: "risc_notification_delivery_duration_seconds", preferredDisplayUnit: .seconds).recordNanoseconds(duration.nanoseconds)
    }

    /// Delivery health, as the probes recorded it.
    public static func deliveryHealth(healthy: Bool, lastVerified: Date?, roundTripSeconds: Double?, streamEnabled: Bool?) {
        Gauge(label: "risc_delivery_healthy").record(healthy ? 1 : 0)
        if let lastVerified { Gauge(label: "risc_delivery_last_verified_timestamp_seconds").record(lastVerified.timeIntervalSince1970) }
        if let roundTripSeconds { Gauge(label: "risc_delivery_round_trip_seconds").record(roundTripSeconds) }
        if let streamEnabled { Gauge(label: "risc_stream_enabled").record(streamEnabled ? 1 : 0) }
    }

    /// A probe whose verification SET did not arrive within the interval.
    /// A poll of a Shared Signals stream that was answered: the SETs it brought, and the acknowledgements and errors
    /// it carried.
    public static func polled(transmitter: String, sets: Int, acks: Int, errors: Int) {
        let dimensions = [("transmitter", transmitter)]
        Counter(label: "risc_polls_total", dimensions: dimensions + [("outcome", "answered")]).increment()
        if sets > 0 { Counter(label: "risc_poll_sets_total", dimensions: dimensions).increment(by: sets) }
        if acks > 0 { Counter(label: "risc_poll_acks_total", dimensions: dimensions).increment(by: acks) }
        if errors > 0 { Counter(label: "risc_poll_set_errors_total", dimensions: dimensions).increment(by: errors) }
    }

    /// A poll that failed (the transmitter unreachable, or an answer that was not one).
    public static func pollFailed(transmitter: String) {
        Counter(label: "risc_polls_total", dimensions: [("transmitter", transmitter), ("outcome", "failed")]).increment()
    }

    public static func deliveryProbeTimedOut() {
        Counter(label: "risc_delivery_probes_timed_out_total").increment()
    }

    /// A sign-in: `success`, `invalid_token`, `account_disabled` or `unavailable`.
    public static func signIn(outcome: String) {
        Counter(label: "risc_signins_total", dimensions: [("outcome", outcome)]).increment()
    }
}

extension Duration {
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}
