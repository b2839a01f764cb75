-- Delivery health (SPEC §9): each probe asks Google for a verification SET with a fresh `state`, and records
-- what the management API reported and when (whether) the SET arrived through POST /risc/events.
CREATE TABLE risc_delivery_probes (
    id                bigserial   PRIMARY KEY,
    state             text        NOT NULL UNIQUE,
    -- The start of the prober's process: `stream health` counts the timeouts since the service started.
    prober_started_at timestamptz NOT NULL,
    requested_at      timestamptz NOT NULL DEFAULT now(),
    arrived_at        timestamptz,
    timed_out         boolean     NOT NULL DEFAULT false,
    -- What the management API reported just before; NULL when it could not be read (then `error` says why).
    stream_enabled    boolean,
    delivery_url      text,
    events_requested  text[],
    error             text
);

-- The arrival is recorded as the SET is stored, by whichever instance receives it, without scanning risc_events:
-- only verification events fire this.
CREATE FUNCTION risc_verification_arrived() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE risc_delivery_probes SET arrived_at = now()
     WHERE arrived_at IS NULL
       AND state IN (SELECT e ->> 'state' FROM jsonb_array_elements(NEW.events) AS e WHERE e ? 'state');
    RETURN NULL;
END
$$;

CREATE TRIGGER risc_events_verification_arrived
    AFTER INSERT ON risc_events
    FOR EACH ROW
    WHEN (NEW.event_types && ARRAY['https://schemas.openid.net/secevent/risc/event-type/verification',
                                   'https://schemas.openid.net/secevent/ssf/event-type/verification'])
    EXECUTE FUNCTION risc_verification_arrived();
