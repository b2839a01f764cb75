-- Security event tokens as received: one row per (issuer, jti), the unit of work for the worker.
CREATE TABLE risc_events (
    id           bigserial   PRIMARY KEY,
    issuer       text        NOT NULL,
    jti          text        NOT NULL,
    -- Every event-type URI of the SET, as sent (one, in practice).
    event_types  text[]      NOT NULL,
    -- The Google account `sub` the SET is about, when its subject names one.
    subject_sub  text,
    -- The decoded events (typed model), and the payload exactly as signed (never the signature).
    events       jsonb       NOT NULL,
    claims       jsonb       NOT NULL,
    issued_at    timestamptz NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    -- pending: new; retry: failed, waiting for run_after; done; ignored: unknown type; dead: out of attempts.
    status       text        NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'retry', 'done', 'ignored', 'dead')),
    attempts     integer     NOT NULL DEFAULT 0,
    run_after    timestamptz NOT NULL DEFAULT now(),
    last_error   text,
    completed_at timestamptz,
    CONSTRAINT risc_events_issuer_jti UNIQUE (issuer, jti)
);

CREATE INDEX risc_events_runnable ON risc_events (run_after, id) WHERE status IN ('pending', 'retry');
CREATE INDEX risc_events_subject ON risc_events (subject_sub, id) WHERE subject_sub IS NOT NULL;

-- One notification per inserting statement wakes every listening worker.
CREATE FUNCTION risc_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('risc_events', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER risc_events_inserted
    AFTER INSERT ON risc_events
    FOR EACH STATEMENT EXECUTE FUNCTION risc_events_notify();
