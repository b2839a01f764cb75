-- A probe's verification SET is recorded as arrived as it is stored, by whichever instance receives it, without
-- scanning risc_events: only verification events fire this.
CREATE OR REPLACE FUNCTION risc_verification_arrived() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE risc_delivery_probes SET arrived_at = now()
     WHERE arrived_at IS NULL
       AND state IN (SELECT e ->> 'state' FROM jsonb_array_elements(NEW.events) AS e WHERE e ? 'state');
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER risc_events_verification_arrived
    AFTER INSERT ON risc_events
    FOR EACH ROW
    WHEN (NEW.event_types && ARRAY['https://schemas.openid.net/secevent/risc/event-type/verification',
                                   'https://schemas.openid.net/secevent/ssf/event-type/verification'])
    EXECUTE FUNCTION risc_verification_arrived();
