-- The one lock that serialises everything done to one user: sign-in, and every event action naming the user.
-- Always taken before any of the user's rows are locked, so sign-in and workers cannot deadlock.
CREATE OR REPLACE FUNCTION risc_lock_user(sub text) RETURNS void LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(hashtext('risc_user:' || sub))
$$;
