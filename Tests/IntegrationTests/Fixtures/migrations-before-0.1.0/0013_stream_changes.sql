-- Stream changes made through `risc-receiver stream update|enable|disable`. What the last probe read from the
-- management API predates a later change: `stream health` says so instead of repeating it, and the prober probes
-- again within a second or two rather than at its next interval.
CREATE TABLE risc_stream_changes (
    id         bigserial   PRIMARY KEY,
    changed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- What was asked of the management API, e.g. "update https://example.com/risc/events" or "disable".
    change     text        NOT NULL
);

-- When the probe read the stream from the management API (the row is written after that read): a change at or
-- after this is not reflected in the row. NULL in rows written by a binary from before this migration.
ALTER TABLE risc_delivery_probes ADD COLUMN stream_read_at timestamptz;
