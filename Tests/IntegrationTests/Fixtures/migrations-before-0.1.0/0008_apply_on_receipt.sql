-- Performance and retention (issue 14).

-- 1. A new event's actions are applied in the transaction that stores it, when the receiver asks for it
--    (`serve` with its worker, the default): the revocation is committed before the 202, however many events
--    arrive at once, and the event is written once, as done, instead of stored, claimed and rewritten.
--    The receiver decides the actions (module RISC), as a worker would from the stored events.
--    If applying fails, the batch is stored pending instead, for a worker to retry; with `apply` false
--    (`serve --no-worker`) it is always stored pending.
DROP PROCEDURE risc_store_events(text[], text[], text[], text[], text[], text[], float8[], text[], bigint[]);

-- Inserts a batch (parallel arrays, one element per SET) and returns, for each new row, its 1-based place in
-- the batch and its id. A (issuer, jti) already stored, or repeated in the batch, is inserted once.
-- Rows go in in (issuer, jti) order, so two batches holding the same SETs wait on each other in one order.
CREATE FUNCTION risc_insert_events(
    issuers text[], jtis text[], types text[], subs text[], events text[], claims text[], iats float8[],
    statuses text[], applied boolean
) RETURNS TABLE (batch_index bigint, event_id bigint) LANGUAGE sql AS $$
    WITH input AS (
        SELECT * FROM unnest(issuers, jtis, types, subs, events, claims, iats, statuses) WITH ORDINALITY
            AS i(issuer, jti, types, sub, events, claims, iat, status, n)
    ), inserted AS (
        INSERT INTO risc_events (issuer, jti, event_types, subject_sub, events, claims, issued_at, status, attempts,
                                 completed_at)
        SELECT i.issuer, i.jti, ARRAY(SELECT jsonb_array_elements_text(i.types::jsonb)), NULLIF(i.sub, ''),
               i.events::jsonb, i.claims::json, to_timestamp(i.iat),
               CASE WHEN applied AND i.status = 'pending' THEN 'done' ELSE i.status END,
               CASE WHEN applied AND i.status = 'pending' THEN 1 ELSE 0 END,
               CASE WHEN i.status = 'ignored' OR applied THEN now() END
          FROM input i ORDER BY i.issuer, i.jti
        ON CONFLICT (issuer, jti) DO NOTHING
        RETURNING id, issuer, jti
    )
    SELECT DISTINCT ON (inserted.id) input.n, inserted.id
      FROM inserted JOIN input ON input.issuer = inserted.issuer AND input.jti = inserted.jti
     ORDER BY inserted.id, input.n
$$;

CREATE PROCEDURE risc_store_events(
    issuers text[], jtis text[], types text[], subs text[], events text[], claims text[], iats float8[],
    statuses text[],
    -- The actions, one element per action, in each event's order: `action_rows` is the 1-based place of the
    -- action's SET in the batch; the rest are risc_apply_actions's arguments.
    action_rows integer[], positions integer[], kinds text[], action_subs text[], arguments text[],
    client_ids text[], apply boolean,
    INOUT stored bigint[] DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    new_rows  bigint[];
    new_ids   bigint[];
    a_events  bigint[];
    a_pos     integer[];
    a_kinds   text[];
    a_subs    text[];
    a_args    text[];
    a_clients text[];
    applied   boolean := false;
BEGIN
    IF apply THEN
        BEGIN
            SELECT array_agg(batch_index), array_agg(event_id) INTO new_rows, new_ids
              FROM risc_insert_events(issuers, jtis, types, subs, events, claims, iats, statuses, true);
            -- Sorted by user, as risc_apply_actions requires: every transaction takes users' locks in one order.
            SELECT array_agg(n.id ORDER BY a.sub, n.id, a.k), array_agg(a.position ORDER BY a.sub, n.id, a.k),
                   array_agg(a.kind ORDER BY a.sub, n.id, a.k), array_agg(a.sub ORDER BY a.sub, n.id, a.k),
                   array_agg(a.argument ORDER BY a.sub, n.id, a.k), array_agg(a.client_ids ORDER BY a.sub, n.id, a.k)
              INTO a_events, a_pos, a_kinds, a_subs, a_args, a_clients
              FROM unnest(action_rows, positions, kinds, action_subs, arguments, client_ids) WITH ORDINALITY
                   AS a(batch_index, position, kind, sub, argument, client_ids, k)
              JOIN unnest(new_rows, new_ids) AS n(batch_index, id) ON n.batch_index = a.batch_index;
            PERFORM risc_apply_actions(coalesce(a_events, '{}'), coalesce(a_pos, '{}'), coalesce(a_kinds, '{}'),
                                       coalesce(a_subs, '{}'), coalesce(a_args, '{}'), coalesce(a_clients, '{}'), '{}');
            applied := true;
        EXCEPTION WHEN OTHERS THEN
            -- One failing action must not cost the batch its storage: it is stored pending, for a worker.
            RAISE WARNING 'applying a batch on receipt failed, stored for the worker: %', SQLERRM;
        END;
    END IF;
    IF NOT applied THEN
        SELECT array_agg(batch_index) INTO new_rows
          FROM risc_insert_events(issuers, jtis, types, subs, events, claims, iats, statuses, false);
    END IF;
    stored := new_rows;
    COMMIT;
END
$$;

-- 2. Workers are woken only by events left for them: a row stored done on receipt wakes nobody.
DROP TRIGGER risc_events_inserted ON risc_events;
CREATE TRIGGER risc_events_inserted
    AFTER INSERT ON risc_events
    FOR EACH ROW WHEN (NEW.status IN ('pending', 'retry')) EXECUTE FUNCTION risc_events_notify();

-- 3. Session caches hear of rows that changed, and only those: a statement trigger ran (with its transition
--    table) for every UPDATE, also the many that change nothing, such as a revocation for a user with no
--    session. PostgreSQL still folds repeated notifications within a transaction into one.
DROP TRIGGER risc_sessions_updated ON risc_sessions;
DROP TRIGGER risc_sessions_deleted ON risc_sessions;
DROP TRIGGER risc_users_updated ON risc_users;
DROP FUNCTION risc_sessions_changed();
CREATE FUNCTION risc_user_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- A NOTIFY payload must be shorter than 8,000 bytes: a longer sub makes every cache drop everything.
    PERFORM pg_notify('risc_sessions', CASE WHEN octet_length(OLD.sub) < 1000 THEN OLD.sub ELSE '*' END);
    RETURN NULL;
END
$$;
CREATE TRIGGER risc_sessions_updated AFTER UPDATE ON risc_sessions FOR EACH ROW EXECUTE FUNCTION risc_user_changed();
CREATE TRIGGER risc_sessions_deleted AFTER DELETE ON risc_sessions FOR EACH ROW EXECUTE FUNCTION risc_user_changed();
CREATE TRIGGER risc_users_updated AFTER UPDATE ON risc_users FOR EACH ROW EXECUTE FUNCTION risc_user_changed();

-- 4. Retention (RISC_EVENT_RETENTION_DAYS) deletes old events with their actions. A session or grant keeps the
--    id of the event that revoked it as a plain number: checking it against every deleted event would scan
--    both tables each time, and a revoked session outlives the record of why only as that number.
ALTER TABLE risc_sessions DROP CONSTRAINT risc_sessions_revoked_by_event_fkey;
ALTER TABLE risc_grants DROP CONSTRAINT risc_grants_revoked_by_event_fkey;
-- Finds the old events without a B-tree to maintain on every insert: rows arrive in received_at order.
CREATE INDEX risc_events_received_brin ON risc_events USING brin (received_at);
