/// Where a stored event is in its life. The raw values are what the database's CHECK constraint,
/// the plpgsql functions, the admin API and its OpenAPI document say; a test holds them all to this list. It
/// encodes as its raw value, and keys a JSON object by it (`by_status`).
///
/// ```
///   inbox applies the actions on receipt (serve with its worker)
/// ─────────────────────────────────────────────────────┐
///             worker applies the actions               ▼
/// pending ───────────────────────────────► done
///   │  ▲ ▲                                   │
///   │  │ └─────── operator replays ──────────┤
///   │  │                                     │
///   │  attempts left     no attempts left    │
///   ▼  │                                     │
/// retry ─────────────────────────────────► dead
/// ```
public enum EventStatus: String, Sendable, CaseIterable, Encodable, CodingKeyRepresentable {
    /// Stored and waiting for its first attempt. Moved here by the inbox when a SET of a known type is
    /// committed, and by an operator's replay. Next: a worker claims it as soon as it is woken (NOTIFY) or
    /// polls, and it becomes `done`, or `retry`/`dead` if applying its actions fails.
    case pending
    /// An attempt failed and another one is due at `run_after` (exponential backoff with jitter). Moved here
    /// by the worker. Next: claimed again once `run_after` has passed, then `done`, `retry` or `dead`.
    case retry
    /// Its actions were applied and recorded, in the same transaction as this status. Moved here by the
    /// worker, or stored so by the inbox, which applied the actions in the transaction that stored the event
    /// (`serve` with its worker). Final, unless an operator replays it (every action is idempotent), or
    /// deleted with its actions after RISC_EVENT_RETENTION_DAYS.
    case done
    /// Stored for the record but nothing to do: no event type this receiver knows. Moved here by the inbox
    /// at ingest. Final: never claimed, never replayed; deleted after RISC_EVENT_RETENTION_DAYS.
    case ignored
    /// Failed its last attempt (RISC_MAX_ATTEMPTS) and was dead-lettered, kept with `last_error`. Moved here
    /// by the worker. Final, unless an operator replays it.
    case dead

    /// The statuses of events waiting for a worker: `pending` and `retry`. The admin API's `queue_depth` and
    /// `oldest_pending_age_seconds` count these.
    public static let waiting: [EventStatus] = [.pending, .retry]

    /// The statuses retention deletes once old: nothing is left to do for them.
    public static let finished: [EventStatus] = [.done, .ignored]

    /// The statuses an operator's replay may move back to `pending`.
    public static let replayable: [EventStatus] = [.pending, .retry, .done, .dead]

    /// The status an event is stored with at ingest.
    public static func initial(knownType: Bool) -> EventStatus { knownType ? .pending : .ignored }
}
