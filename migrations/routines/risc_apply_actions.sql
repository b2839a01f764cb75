-- Carries out a batch of actions, records each with the number of rows it changed, and marks `done_events` done,
-- all in the caller's transaction; returns, per event and action kind recorded, the number of actions and the rows
-- they changed (for the metrics, and the spans of traces). The code decides each event's actions (AccountAction); these rules are decided here,
-- against the rows as they are:
-- - staleness: an account-state change older than the account state (by iat, then arrival, then place in the
--   SET) changes nothing, and is recorded as skipped (`skipped`: never notified);
-- - the hijacking cutoff: the same event's session revocation then ends only the sessions created up to its iat;
--   otherwise every session created up to its arrival. ID tokens issued up to the cutoff no longer sign in;
-- - a replay of an event last applied in shadow mode (`risc_events.shadow`, applied now with `enforce`; or, for
--   `events explain`, which runs without `enforce`, with `as_replay`: what such a replay would do) leaves
--   state at least as strict as enforcing on time would have: its revocation ends the sessions created up to now
--   (one made meanwhile may be the attacker's), and its tokens-revoked erasure keeps the grants stored after the
--   event's iat (issued after the revocation, so not the revoked tokens);
-- - audience confinement: token-revoked erases only grants of the SET's audiences (`client_ids`);
-- - the ambiguity flag: a token identifier that matched several grants erases them all and records an
--   `ambiguous_token_identifier` action beside it.
--
-- `actions` is a JSON array, one object per action, in each event's order:
--   {"event": N, "position": P, "kind": K, "sub": S or null, "argument": A or null, "client_ids": [...]}
-- A kind that acts on a user with a null `sub` is a Shared Signals event about someone who is not a user of ours.
-- `event` is the event's id; or, when `event_ids` is given, the 1-based place of the id in `event_ids` (the
-- inbox's batch rows), where NULL (a duplicate SET) skips the action. `position` is the event's place in its SET.
-- Every user the batch touches is locked first, in one order (by lock key: two subs may share one): the actions'
-- users, and the owners of the grants a token identifier names (such an action names no user of its own). Sign-in
-- takes one user's lock.
-- Without `enforce` (shadow mode), nothing is changed and the actions are recorded as shadow actions (no
-- notification follows them). Each kind decides its rows once, by one query, in both modes; only enforcing then
-- changes them, by id, and the rows decided are the count recorded: the modes cannot drift apart. Each is judged
-- against the rows as they are: an earlier shadow action changed nothing for a later one to see.
-- A user's rows, grants included, are only changed under that user's lock, so no two batches, and no batch and
-- sign-in, can wait on each other in a cycle. The actions then run sorted by user.
-- Earlier signatures and results: a second overload would make a call ambiguous, and a result cannot be replaced.
DROP FUNCTION IF EXISTS risc_apply_actions(jsonb, bigint[], bigint[]);
DROP FUNCTION IF EXISTS risc_apply_actions(jsonb, bigint[], bigint[], boolean);
DROP FUNCTION IF EXISTS risc_apply_actions(jsonb, bigint[], bigint[], boolean, boolean);
CREATE OR REPLACE FUNCTION risc_apply_actions(actions jsonb, event_ids bigint[] DEFAULT NULL, done_events bigint[] DEFAULT '{}',
                                              enforce boolean DEFAULT true, as_replay boolean DEFAULT NULL)
RETURNS TABLE (applied_event bigint, kind text, actions_recorded bigint, rows_changed bigint) LANGUAGE plpgsql AS $$
DECLARE
    a           record;
    event_id    bigint;
    received    timestamptz;
    issued      timestamptz;
    replaying   boolean;
    affected    integer;
    detail      text;
    cutoff      timestamptz;
    -- The rows an action decided on: the sessions it ends, the grants it erases, the user's row (none if absent).
    sessions    bigint[];
    erased      uuid[];
    account     risc_users;
    -- Each deciding query locks the rows it returns as the UPDATE that changes them would (an UPDATE that leaves
    -- the key alone takes FOR NO KEY UPDATE); a row changed meanwhile is read again and checked against the
    -- query's condition, as that UPDATE would check it. So every row decided is a row changed. Shadow mode takes
    -- the same locks, so it waits where enforcing would; and the queries are static, their plans kept.
    -- Staleness is per event and per user: "event:position:sub" of each account-state change that was older
    -- than the account state. Only that event's own actions for that user are affected.
    stale       text[] := '{}';
    ambiguous   integer;
    out_events  bigint[] := '{}';
    out_places  integer[] := '{}';
    out_kinds   text[] := '{}';
    out_subs    text[] := '{}';
    out_details text[] := '{}';
    out_counts  integer[] := '{}';
    out_skipped boolean[] := '{}';
    -- The batch's lone revocations: the 1-based places in `actions`, and per place its event, position, sub, detail
    -- and cutoff; the sessions they end.
    solo_places     bigint[];
    solo_events     bigint[];
    solo_positions  integer[];
    solo_subs       text[];
    solo_details    text[];
    solo_cutoffs    timestamptz[];
    solo_sessions   bigint[];
    solo_counts     integer[];
BEGIN
    -- One statement takes every lock, in the order of the sort: the function is volatile, so it runs on the rows as
    -- sorted. The actions are read out of the JSON once, for the three branches.
    PERFORM risc_lock_user(l.sub) FROM (
        WITH x AS MATERIALIZED (SELECT * FROM jsonb_to_recordset(actions) AS x(kind text, sub text, argument text, client_ids jsonb))
        SELECT DISTINCT hashtext(u.sub) AS lock_key, u.sub COLLATE "C" AS sub FROM (
            SELECT x.sub FROM x WHERE x.sub IS NOT NULL
            UNION ALL
            SELECT g.sub FROM x JOIN risc_grants g ON g.token_prefix = x.argument
             WHERE x.kind = 'delete_grant_by_prefix' AND g.client_id IN (SELECT jsonb_array_elements_text(x.client_ids))
            UNION ALL
            SELECT g.sub FROM x JOIN risc_grants g ON g.token_hash = x.argument
             WHERE x.kind = 'delete_grant_by_hash' AND g.client_id IN (SELECT jsonb_array_elements_text(x.client_ids))
        ) AS u) AS l
        ORDER BY l.lock_key, l.sub;
    -- The most common batch is many users' sessions-revoked, one each. A revocation that is its user's only action in
    -- the batch, of an event not replayed from shadow mode, is decided and applied here with the others like it, by a
    -- handful of statements for the whole batch rather than several per action; what it decides is what the loop
    -- below would (no other action of the batch can touch its user's rows, so neither the order nor staleness, which
    -- takes an account-state change of the same event and user, come into it). Every other action goes through the
    -- loop.
    -- The rows are sorted once, for all six arrays: the aggregates read them in one pass, so their elements line up.
    -- (An ORDER BY in each aggregate sorted them six times.)
    SELECT array_agg(r.n), array_agg(r.event), array_agg(r.position), array_agg(r.sub), array_agg(r.detail), array_agg(r.received_at)
      INTO solo_places, solo_events, solo_positions, solo_subs, solo_details, solo_cutoffs
      FROM (SELECT x.n, e.id AS event, x.position, x.sub, NULLIF(x.argument, '') AS detail, e.received_at
              FROM (SELECT y.*, count(*) OVER (PARTITION BY y.sub COLLATE "C") AS actions_of_user
                      FROM ROWS FROM (jsonb_to_recordset(actions) AS (event bigint, position integer, kind text, sub text, argument text))
                           WITH ORDINALITY AS y(event, position, kind, sub, argument, n)) AS x
              JOIN risc_events e ON e.id = CASE WHEN event_ids IS NULL THEN x.event ELSE event_ids[x.event::int] END
             WHERE x.kind = 'revoke_sessions' AND x.sub IS NOT NULL AND x.actions_of_user = 1
               AND NOT (coalesce(as_replay, enforce) AND e.shadow)
             ORDER BY x.sub COLLATE "C", e.id, x.n) AS r;
    IF solo_places IS NOT NULL THEN
        solo_sessions := ARRAY(SELECT s.id FROM risc_sessions s
                                 JOIN unnest(solo_subs, solo_cutoffs) AS r(sub, cutoff) ON s.sub = r.sub
                                WHERE s.revoked_at IS NULL AND s.created_at <= r.cutoff
                                ORDER BY s.id FOR NO KEY UPDATE OF s);
        -- Without a session to end (users new to us, the usual case), every count is 0, and no statement is run for it.
        IF cardinality(solo_sessions) = 0 THEN
            solo_counts := array_fill(0, ARRAY[cardinality(solo_places)]);
        ELSE
            SELECT array_agg(coalesce(c.n, 0) ORDER BY r.place) INTO solo_counts
              FROM unnest(solo_subs) WITH ORDINALITY AS r(sub, place)
              LEFT JOIN (SELECT s.sub, count(*)::int AS n FROM risc_sessions s WHERE s.id = ANY (solo_sessions) GROUP BY s.sub) AS c
                     ON c.sub = r.sub;
        END IF;
        IF enforce THEN
            IF cardinality(solo_sessions) > 0 THEN
                UPDATE risc_sessions s SET revoked_at = now(), revoked_by_event = r.event
                  FROM unnest(solo_subs, solo_events) AS r(sub, event)
                 WHERE s.id = ANY (solo_sessions) AND s.sub = r.sub;
            END IF;
            INSERT INTO risc_users AS u (sub, sessions_revoked_before)
            SELECT r.sub, r.cutoff FROM unnest(solo_subs, solo_cutoffs) AS r(sub, cutoff)
            ON CONFLICT (sub) DO UPDATE SET sessions_revoked_before = EXCLUDED.sessions_revoked_before, updated_at = now()
             WHERE u.sessions_revoked_before IS NULL OR u.sessions_revoked_before < EXCLUDED.sessions_revoked_before;
        END IF;
        out_events := solo_events;
        out_places := solo_positions;
        out_kinds := array_fill('revoke_sessions'::text, ARRAY[cardinality(solo_places)]);
        out_subs := solo_subs;
        out_details := solo_details;
        out_counts := solo_counts;
        out_skipped := array_fill(false, ARRAY[cardinality(solo_places)]);
    END IF;
    FOR a IN
        SELECT CASE WHEN event_ids IS NULL THEN x.event ELSE event_ids[x.event::int] END AS event, x.position, x.kind, x.sub,
               x.argument, x.client_ids
          FROM ROWS FROM (jsonb_to_recordset(actions)
                          AS (event bigint, position integer, kind text, sub text, argument text, client_ids jsonb))
               WITH ORDINALITY AS x(event, position, kind, sub, argument, client_ids, n)
         -- The first condition names no row, so it is checked once, before the actions are read: when every action
         -- was a lone revocation (the usual batch), the loop's query reads nothing.
         WHERE coalesce(cardinality(solo_places), 0) < jsonb_array_length(actions)
           AND (event_ids IS NULL OR event_ids[x.event::int] IS NOT NULL) AND NOT (x.n = ANY (coalesce(solo_places, '{}')))
         ORDER BY coalesce(x.sub, '') COLLATE "C", 1, x.n
    LOOP
        IF event_id IS DISTINCT FROM a.event THEN
            event_id := a.event;
            SELECT e.received_at, e.issued_at, coalesce(as_replay, enforce) AND e.shadow INTO STRICT received, issued, replaying
              FROM risc_events e WHERE e.id = event_id;
        END IF;
        affected := 0;
        ambiguous := 0;
        detail := NULLIF(a.argument, '');
        erased := NULL;
        -- A Shared Signals subject that names no user of ours: nothing to change, and still recorded (and notified),
        -- so that the app's own stores hear of it.
        IF a.sub IS NULL AND a.kind IN ('revoke_sessions', 'delete_grants', 'disable_sign_in', 'enable_sign_in', 'flag_for_review',
                                        'require_credential_change') THEN
            detail := 'the subject names no user of this service';
        ELSE
            CASE a.kind
            WHEN 'revoke_sessions' THEN
                -- A stale hijacking report still ends the sessions that existed when it was issued.
                IF (event_id || ':' || a.position || ':' || a.sub) = ANY (stale) THEN
                    cutoff := issued;
                    detail := 'stale event: only sessions created up to its iat';
                ELSIF replaying THEN
                    -- The clock, not the transaction's start: a sign-in that held the user's lock while this batch
                    -- waited for it committed a session after now().
                    cutoff := clock_timestamp();
                    detail := 'replayed from shadow mode: sessions created up to the replay';
                ELSE
                    cutoff := received;
                END IF;
                sessions := ARRAY(SELECT s.id FROM risc_sessions s
                                   WHERE s.sub = a.sub AND s.revoked_at IS NULL AND s.created_at <= cutoff FOR NO KEY UPDATE);
                affected := cardinality(sessions);
                IF enforce THEN
                    -- Not with none: the statement would still fire the session caches' trigger (risc_user_changed).
                    IF affected > 0 THEN
                        UPDATE risc_sessions SET revoked_at = now(), revoked_by_event = event_id WHERE id = ANY (sessions);
                    END IF;
                    -- ID tokens issued up to the cutoff no longer sign the user in (not counted: no session row).
                    INSERT INTO risc_users AS u (sub, sessions_revoked_before) VALUES (a.sub, cutoff)
                    ON CONFLICT (sub) DO UPDATE SET sessions_revoked_before = EXCLUDED.sessions_revoked_before, updated_at = now()
                     WHERE u.sessions_revoked_before IS NULL OR u.sessions_revoked_before < EXCLUDED.sessions_revoked_before;
                END IF;
            -- The grants each kind erases, each found through its own index; then one erasure for all three.
            WHEN 'delete_grants' THEN
                -- iat counts whole seconds: a grant stored in its second may be one it revoked. Not replaying, every
                -- grant is stored before infinity.
                erased := ARRAY(SELECT g.id FROM risc_grants g
                                 WHERE g.sub = a.sub AND g.revoked_at IS NULL
                                   AND g.created_at < CASE WHEN replaying THEN issued + interval '1 second' ELSE 'infinity' END
                                 FOR NO KEY UPDATE);
                IF replaying THEN detail := 'replayed from shadow mode: grants stored up to its iat'; END IF;
            -- token-revoked names a token of one of the SET's audiences: grants of other clients are not touched.
            -- An erased grant keeps no identifier, so only live grants match.
            WHEN 'delete_grant_by_prefix' THEN
                erased := ARRAY(SELECT g.id FROM risc_grants g
                                 WHERE g.token_prefix = a.argument AND g.client_id = ANY (ARRAY(SELECT jsonb_array_elements_text(a.client_ids)))
                                 FOR NO KEY UPDATE);
            WHEN 'delete_grant_by_hash' THEN
                erased := ARRAY(SELECT g.id FROM risc_grants g
                                 WHERE g.token_hash = a.argument AND g.client_id = ANY (ARRAY(SELECT jsonb_array_elements_text(a.client_ids)))
                                 FOR NO KEY UPDATE);
            -- The account kinds change the user's one row, inserted if absent, unless it already says so. The row read is
            -- locked, and an absent one cannot appear: every writer of risc_users holds the user's lock. The upserts
            -- keep their conditions all the same, so that a writer that one day does not can never undo a newer state.
            -- Ordered by (iat, event id, position in the SET): the id is the arrival order, so of two events issued
            -- in the same second the later arrival wins, and a replay of the earlier one cannot undo it.
            WHEN 'disable_sign_in', 'enable_sign_in' THEN
                SELECT u.* INTO account FROM risc_users u WHERE u.sub = a.sub FOR NO KEY UPDATE;
                affected := CASE WHEN account.sub IS NULL OR account.sign_in_state_at IS NULL
                                   OR (account.sign_in_state_at, coalesce(account.sign_in_state_event, 0),
                                       coalesce(account.sign_in_state_position, 0)) <= (issued, event_id, a.position)
                                 THEN 1 ELSE 0 END;
                IF enforce AND affected > 0 THEN
                    INSERT INTO risc_users AS u (sub, sign_in_disabled, disabled_reason, sign_in_state_at, sign_in_state_event,
                                                 sign_in_state_position)
                    VALUES (a.sub, a.kind = 'disable_sign_in', CASE WHEN a.kind = 'disable_sign_in' THEN NULLIF(a.argument, '') END,
                            issued, event_id, a.position)
                    ON CONFLICT (sub) DO UPDATE
                       SET sign_in_disabled = EXCLUDED.sign_in_disabled, disabled_reason = EXCLUDED.disabled_reason,
                           sign_in_state_at = EXCLUDED.sign_in_state_at, sign_in_state_event = EXCLUDED.sign_in_state_event,
                           sign_in_state_position = EXCLUDED.sign_in_state_position, updated_at = now()
                     WHERE u.sign_in_state_at IS NULL
                        OR (u.sign_in_state_at, coalesce(u.sign_in_state_event, 0), coalesce(u.sign_in_state_position, 0))
                           <= (EXCLUDED.sign_in_state_at, EXCLUDED.sign_in_state_event, EXCLUDED.sign_in_state_position);
                END IF;
                IF affected = 0 THEN
                    stale := stale || (event_id || ':' || a.position || ':' || a.sub);
                    detail := coalesce(detail || ': ', '') || 'skipped, the account state is newer than the event';
                END IF;
            WHEN 'flag_for_review' THEN
                SELECT u.* INTO account FROM risc_users u WHERE u.sub = a.sub FOR NO KEY UPDATE;
                affected := CASE WHEN account.sub IS NULL OR NOT account.review_required THEN 1 ELSE 0 END;
                IF enforce AND affected > 0 THEN
                    INSERT INTO risc_users AS u (sub, review_required) VALUES (a.sub, true)
                    ON CONFLICT (sub) DO UPDATE SET review_required = true, updated_at = now() WHERE NOT u.review_required;
                END IF;
            WHEN 'require_credential_change' THEN
                SELECT u.* INTO account FROM risc_users u WHERE u.sub = a.sub FOR NO KEY UPDATE;
                affected := CASE WHEN account.sub IS NULL OR NOT account.credential_change_required THEN 1 ELSE 0 END;
                IF enforce AND affected > 0 THEN
                    INSERT INTO risc_users AS u (sub, credential_change_required) VALUES (a.sub, true)
                    ON CONFLICT (sub) DO UPDATE SET credential_change_required = true, updated_at = now()
                     WHERE NOT u.credential_change_required;
                END IF;
            WHEN 'record_verification', 'skip' THEN
                affected := 0;
            ELSE
                RAISE EXCEPTION 'unknown action kind %', a.kind;
            END CASE;
        END IF;
        IF erased IS NOT NULL THEN
            affected := cardinality(erased);
            IF enforce AND affected > 0 THEN
                UPDATE risc_grants
                   SET ciphertext = NULL, token_prefix = NULL, token_hash = NULL,
                       revoked_at = now(), revoked_by_event = event_id, updated_at = now()
                 WHERE id = ANY (erased);
            END IF;
            IF a.kind <> 'delete_grants' THEN ambiguous := affected; END IF;
        END IF;
        out_events := out_events || event_id;
        out_places := out_places || a.position;
        out_kinds := out_kinds || a.kind;
        out_subs := out_subs || a.sub;
        out_details := out_details || detail;
        out_counts := out_counts || affected;
        out_skipped := out_skipped || (a.sub IS NOT NULL AND (a.kind = 'disable_sign_in' OR a.kind = 'enable_sign_in') AND affected = 0);
        -- A 16-character prefix can be shared: erasing every match fails safe, and admins are told.
        IF ambiguous > 1 THEN
            out_events := out_events || event_id;
            out_places := out_places || a.position;
            out_kinds := out_kinds || 'ambiguous_token_identifier'::text;
            out_subs := out_subs || NULL::text;
            out_details := out_details || ('the identifier matched ' || ambiguous || ' grants; all '
                                           || CASE WHEN enforce THEN 'were' ELSE 'would be' END || ' erased');
            out_counts := out_counts || ambiguous;
            out_skipped := out_skipped || false;
        END IF;
    END LOOP;

    INSERT INTO risc_event_actions (event_id, event_position, kind, sub, detail, rows_affected, shadow, skipped)
    SELECT o.event_id, o.place, o.kind, o.sub, o.detail, o.n, NOT enforce, o.skipped
      FROM unnest(out_events, out_places, out_kinds, out_subs, out_details, out_counts, out_skipped)
           AS o(event_id, place, kind, sub, detail, n, skipped);

    -- Only a worker names events to mark done (the inbox stores them done); skipped when there are none, so the
    -- inbox's batches do not plan an UPDATE that changes nothing.
    IF cardinality(done_events) > 0 THEN
        UPDATE risc_events
           SET status = 'done', attempts = attempts + 1, completed_at = now(), last_error = NULL, shadow = NOT enforce
         WHERE id = ANY (done_events) AND status IN ('pending', 'retry');
    END IF;

    RETURN QUERY
        SELECT o.event_id, o.kind, count(*)::int8, sum(o.n)::int8
          FROM unnest(out_events, out_kinds, out_counts) AS o(event_id, kind, n)
         GROUP BY o.event_id, o.kind;
END
$$;
