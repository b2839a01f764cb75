-- Stores a batch of SETs and commits before returning, in one round trip. Over the extended protocol PostgreSQL
-- commits an implicit transaction at Sync, after the rows have been returned, so a client reading the rows could
-- not tell whether the commit succeeded; a procedure called at top level may COMMIT itself: when CALL answers,
-- the batch is durable (or the call failed).
-- With `apply` (serve with its worker, the default), the new events' actions are applied in the same
-- transaction, so a revocation is committed before the 202 and the event is written once, as done. If applying
-- fails, the batch is stored pending instead, for a worker to retry; without `apply` (serve --no-worker) it is
-- always stored pending. `stored` returns the 1-based places of the SETs that were new (NULL when all were
-- duplicates); the applied_* arrays say, per action kind, how many actions were recorded and how many rows they
-- changed (NULL when nothing was applied), for the metrics.
CREATE OR REPLACE PROCEDURE risc_ingest_events(
    issuers text[], jtis text[], types text[], subs text[], events text[], claims text[], iats float8[],
    statuses text[],
    -- The actions, one element per action, in each event's order: `action_rows` is the 1-based place of the
    -- action's SET in the batch; the rest are risc_apply_actions's arguments.
    action_rows integer[], positions integer[], kinds text[], action_subs text[], arguments text[],
    client_ids text[], apply boolean,
    INOUT stored bigint[] DEFAULT NULL,
    -- Of the events applied on receipt: each action kind recorded, its number of actions, and the rows they
    -- changed in all.
    INOUT applied_kinds text[] DEFAULT NULL, INOUT applied_actions bigint[] DEFAULT NULL,
    INOUT applied_rows bigint[] DEFAULT NULL)
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
    applied_kinds := NULL;
    applied_actions := NULL;
    applied_rows := NULL;
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
            SELECT coalesce(array_agg(t.kind), '{}'), coalesce(array_agg(t.actions), '{}'), coalesce(array_agg(t.total), '{}')
              INTO applied_kinds, applied_actions, applied_rows
              FROM (SELECT kind, count(*)::int8 AS actions, sum(rows_affected)::int8 AS total FROM risc_event_actions
                     WHERE event_id = ANY(coalesce(new_ids, '{}')) GROUP BY kind) t;
            applied := true;
        EXCEPTION WHEN OTHERS THEN
            -- One failing action must not cost the batch its storage: it is stored pending, for a worker.
            RAISE WARNING 'applying a batch on receipt failed, stored for the worker: %', SQLERRM;
            applied_kinds := NULL;
            applied_actions := NULL;
            applied_rows := NULL;
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
