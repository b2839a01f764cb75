-- Shadow mode (RISC_ENFORCE=false): each event's actions are decided and recorded with the rows they would have
-- changed, and change nothing. `shadow` marks such an action; on an event, it says the event's latest
-- application was in shadow mode, so `events replay --since` can find what an operator has still to apply.
ALTER TABLE risc_event_actions ADD COLUMN shadow boolean NOT NULL DEFAULT false;
ALTER TABLE risc_events ADD COLUMN shadow boolean NOT NULL DEFAULT false;
-- Only events waiting for a replay are indexed: none at all in enforcing mode.
CREATE INDEX risc_events_shadow ON risc_events (received_at, id) WHERE shadow;
