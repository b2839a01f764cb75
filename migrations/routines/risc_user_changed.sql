-- Receivers cache session checks in memory; any change to a user's sessions or account flags must reach every
-- receiver at once. Row triggers announce the sub on the `risc_sessions` channel when the changing transaction
-- commits, for rows that changed only (PostgreSQL folds repeated notifications within a transaction into one).
CREATE OR REPLACE FUNCTION risc_user_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A NOTIFY payload must be shorter than 8,000 bytes: a longer sub makes every cache drop everything.
    PERFORM pg_notify('risc_sessions', CASE WHEN octet_length(OLD.sub) < 1000 THEN OLD.sub ELSE '*' END);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER risc_sessions_updated AFTER UPDATE ON risc_sessions FOR EACH ROW EXECUTE FUNCTION risc_user_changed();
CREATE OR REPLACE TRIGGER risc_sessions_deleted AFTER DELETE ON risc_sessions FOR EACH ROW EXECUTE FUNCTION risc_user_changed();
CREATE OR REPLACE TRIGGER risc_users_updated AFTER UPDATE ON risc_users FOR EACH ROW EXECUTE FUNCTION risc_user_changed();
