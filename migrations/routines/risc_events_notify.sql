-- Wakes every listening worker when an event is left for one: a row stored done on receipt wakes nobody.
CREATE OR REPLACE FUNCTION risc_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('risc_events', '');
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER risc_events_inserted
    AFTER INSERT ON risc_events
    FOR EACH ROW WHEN (NEW.status IN ('pending', 'retry')) EXECUTE FUNCTION risc_events_notify();
