-- Receivers cache session checks in memory; any change to a user's sessions or account flags must reach
-- every receiver at once. These triggers announce the affected subs on the `risc_sessions` channel when the
-- changing transaction commits (PostgreSQL folds duplicate notifications within one transaction).
CREATE FUNCTION risc_sessions_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('risc_sessions', sub) FROM (SELECT DISTINCT sub FROM changed) AS c;
    RETURN NULL;
END
$$;

CREATE TRIGGER risc_sessions_updated
    AFTER UPDATE ON risc_sessions REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION risc_sessions_changed();
CREATE TRIGGER risc_sessions_deleted
    AFTER DELETE ON risc_sessions REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION risc_sessions_changed();
CREATE TRIGGER risc_users_updated
    AFTER UPDATE ON risc_users REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION risc_sessions_changed();
