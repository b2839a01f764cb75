-- Poll delivery (RFC 8936). What the poller owes each transmitter: the jti of every SET it stored (an
-- acknowledgement), or the error a push would have been answered with (a setErr). Written once the SET's outcome is
-- final (stored means committed), and deleted once a poll carrying it was answered: a crash in between sends it
-- again with the next poll, from whichever instance polls.
CREATE TABLE risc_poll_acks (
    transmitter text        NOT NULL REFERENCES risc_transmitters (name) ON DELETE CASCADE,
    jti         text        NOT NULL,
    -- NULL: an acknowledgement; else the RFC 8935 error code, with its description.
    error_code  text,
    description text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (transmitter, jti)
);

-- The last poll of each poll stream, for `streams show` and the health report.
ALTER TABLE risc_transmitters
    ADD COLUMN poll_last_at      timestamptz,
    ADD COLUMN poll_last_outcome text;
