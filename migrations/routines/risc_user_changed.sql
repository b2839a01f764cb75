-- Receivers cache session checks in memory; any change to a user's sessions or account flags must reach every
-- receiver at once. Statement triggers announce the subs of the rows a statement changed on the
-- `risc_session_changes` channel when the changing transaction commits: a JSON array of subs per notification,
-- as many as fit in a payload. A batch that revokes the sessions of 500 known users sends two or three
-- notifications, not 500: each one is a message that every listening backend sends and every receiver reads
-- (3-5 µs of a receiver's CPU per notification, a fifth of that per user with 200 a payload; docs/benchmarks.md).
CREATE OR REPLACE FUNCTION risc_user_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Most statements that fire this change no row: an upsert that inserted, an update that matched nothing.
    IF NOT EXISTS (SELECT 1 FROM changed) THEN
        RETURN NULL;
    END IF;
    -- Receivers built before these triggers listen on `risc_sessions`, one sub per payload: until a rolling upgrade
    -- has replaced them they drop their whole cache instead (PostgreSQL folds the repeats of a transaction into one).
    PERFORM pg_notify('risc_sessions', '*');
    -- A payload must be shorter than 8,000 bytes: a sub too long to share one makes every cache drop everything.
    IF EXISTS (SELECT 1 FROM changed WHERE octet_length(to_json(sub)::text) >= 1000) THEN
        PERFORM pg_notify('risc_session_changes', '*');
    END IF;
    -- Subs in chunks: each chunk holds the subs whose running length ends in the same 6,000 bytes, so it is at most
    -- 6,000 bytes plus one sub (under 1,000) plus the brackets. Each sub counts its separator (", ").
    PERFORM pg_notify('risc_session_changes', json_agg(c.sub ORDER BY c.sub COLLATE "C")::text)
       FROM (SELECT d.sub, sum(octet_length(to_json(d.sub)::text) + 2) OVER (ORDER BY d.sub COLLATE "C") AS reach
               FROM (SELECT DISTINCT sub FROM changed WHERE octet_length(to_json(sub)::text) < 1000) AS d) AS c
      GROUP BY (c.reach - 1) / 6000;
    RETURN NULL;
END
$$;

-- Replaced in place (this file used to make them row triggers): CREATE OR REPLACE locks the tables against writes
-- only, where DROP TRIGGER would also hold off every session check's read until `migrate` commits.
CREATE OR REPLACE TRIGGER risc_sessions_updated
    AFTER UPDATE ON risc_sessions REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION risc_user_changed();
CREATE OR REPLACE TRIGGER risc_sessions_deleted
    AFTER DELETE ON risc_sessions REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION risc_user_changed();
CREATE OR REPLACE TRIGGER risc_users_updated
    AFTER UPDATE ON risc_users REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION risc_user_changed();
