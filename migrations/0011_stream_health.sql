-- Each Shared Signals stream's delivery health (RISC_VERIFY_INTERVAL). An instance claims a stream's probe by moving
-- health_probed_at forward, so one probe runs per interval whichever instances run; the probe records what the
-- transmitter said of the stream (its endpoint, or why it could not be read), and asks for a verification whose
-- state is marked as a probe's.
ALTER TABLE risc_transmitters
    ADD COLUMN health_probed_at    timestamptz,
    ADD COLUMN health_endpoint_url text,
    ADD COLUMN health_error        text;

ALTER TABLE risc_stream_verifications
    ADD COLUMN probe     boolean NOT NULL DEFAULT false,
    ADD COLUMN timed_out boolean NOT NULL DEFAULT false;

-- The latest arrival of each stream, read by every health report.
CREATE INDEX risc_stream_verifications_arrived ON risc_stream_verifications (transmitter, arrived_at DESC) WHERE arrived_at IS NOT NULL;
