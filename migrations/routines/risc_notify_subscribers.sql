-- Fills the outbox from the statement that records actions, so in its transaction: a notification exists if and
-- only if its action committed, on every path (a worker, or the inbox applying on receipt). The kinds are
-- ActionKind.notified. The event named is the one in the SET that caused the action (its event_position; an
-- action recorded before positions were, the SET's first). A skipped state change (stale, so it changed nothing
-- and must not be mirrored) is not notified.
-- No NOTIFY here: a transaction that notifies takes a cluster-wide lock at commit and holds it through its WAL
-- flush, so every ingest batch with a notification committed alone, one flush after another (in pgbench, 32 clients
-- inserting 10 rows a transaction: 1,100-2,000 commits/s with a NOTIFY, 3,300-3,700 without). The process that
-- commits the actions wakes its own dispatchers instead (OutboxSignal); the others find them on their poll.
CREATE OR REPLACE FUNCTION risc_notify_subscribers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM risc_subscribers) THEN
        RETURN NULL;
    END IF;
    -- The event's traceparent (tracing on): the delivery continues the trace of the request that stored it.
    -- An event from a Shared Signals transmitter names it, and its subject as received: the event's own, else the
    -- SET's `sub_id`, as the receiver read them (a member that is not an object is no subject).
    INSERT INTO risc_notifications (subscriber_id, action_id, kind, sub, count, event_id, event_jti, event_type, occurred_at,
                                    traceparent, event_issued_at, transmitter, subject)
    SELECT s.id, a.id, a.kind, coalesce(a.sub, ''), a.rows_affected, a.event_id, e.jti, coalesce(e.event_types[coalesce(a.event_position, 0) + 1], ''),
           a.applied_at, e.traceparent, e.issued_at, t.name,
           CASE WHEN t.name IS NOT NULL THEN coalesce(
                    CASE WHEN json_typeof(e.claims -> 'events' -> e.event_types[coalesce(a.event_position, 0) + 1] -> 'subject') = 'object'
                         THEN e.claims -> 'events' -> e.event_types[coalesce(a.event_position, 0) + 1] -> 'subject' END,
                    CASE WHEN json_typeof(e.claims -> 'sub_id') = 'object' THEN e.claims -> 'sub_id' END)::jsonb
           END
      FROM recorded_actions a
      JOIN risc_events e ON e.id = a.event_id
      LEFT JOIN risc_transmitters t ON t.issuer = e.issuer
      JOIN risc_subscribers s ON s.actions IS NULL OR a.kind = ANY (s.actions)
     -- A shadow action changed nothing, so there is nothing to tell.
     WHERE NOT a.shadow AND NOT a.skipped AND a.kind IN ('revoke_sessions', 'delete_grants', 'delete_grant_by_prefix', 'delete_grant_by_hash',
                      'disable_sign_in', 'enable_sign_in', 'flag_for_review', 'require_credential_change')
     ORDER BY a.id, s.id
     -- Held until the transaction ends: a removal of the subscriber waits for it, then takes the notifications it
     -- wrote (risc_subscriber_removed). A subscriber removed meanwhile is skipped, not an error.
     FOR KEY SHARE OF s;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER risc_event_actions_notify
    AFTER INSERT ON risc_event_actions REFERENCING NEW TABLE AS recorded_actions
    FOR EACH STATEMENT EXECUTE FUNCTION risc_notify_subscribers();
