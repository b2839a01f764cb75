-- The one lock that serialises everything done to one user: sign-in, and every event action naming the user.
-- Always taken before any of the user's rows are locked, so sign-in and workers cannot deadlock. Class 1 of the
-- two-key form is the users' own key space (AdvisoryLock.userClass): no other lock of the service can share a key.
CREATE OR REPLACE FUNCTION risc_lock_user(sub text) RETURNS void LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(1, hashtext(sub))
$$;
