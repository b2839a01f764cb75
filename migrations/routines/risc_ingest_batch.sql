-- Stores a batch of SETs and commits before returning, in one round trip. Over the extended protocol PostgreSQL
-- commits an implicit transaction at Sync, after the rows have been returned, so a client reading the rows could
-- not tell whether the commit succeeded; a procedure called at top level may COMMIT itself: when CALL answers,
-- the batch is durable (or the call failed).
-- With `apply` (serve with its worker, the default), the new events' actions are applied in the same
-- transaction, so a revocation is committed before the 202 and the event is written once, as done. If applying
-- fails, the batch is stored pending instead, for a worker to retry; without `apply` (serve --no-worker) it is
-- always stored pending. Without `enforce` (shadow mode), the actions are recorded as shadow actions and change
-- nothing. `stored` returns the 1-based places of the SETs that were new (NULL when all were
-- duplicates); the applied_* arrays say, per action kind, how many actions were recorded and how many rows they
-- changed (NULL when nothing was applied), for the metrics.
-- The successor of risc_ingest_events, which stays, unchanged in what it takes and returns, for the binaries of an
-- earlier release still serving while an upgrade rolls out (a CALL prepared on their connections must keep its
-- result): it passes its calls on to this one.
CREATE OR REPLACE PROCEDURE risc_ingest_batch(
    issuers text[], jtis text[], types text[], subs text[], events text[], claims text[], iats float8[],
    statuses text[],
    -- The batch's actions, as risc_apply_actions takes them, with `event` the 1-based place of the action's SET
    -- in the batch.
    actions jsonb, apply boolean,
    INOUT stored bigint[] DEFAULT NULL,
    -- Of the events applied on receipt: each action kind recorded, its number of actions, and the rows they
    -- changed in all.
    INOUT applied_kinds text[] DEFAULT NULL, INOUT applied_actions bigint[] DEFAULT NULL,
    INOUT applied_rows bigint[] DEFAULT NULL,
    -- The event each of those belongs to: the arrays hold one element per event and kind.
    INOUT applied_events bigint[] DEFAULT NULL,
    enforce boolean DEFAULT true,
    -- Each SET's request's W3C traceparent (tracing on), stored with its event.
    traceparents text[] DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    new_rows bigint[];
    new_ids  bigint[];
    row_ids  bigint[];
    applied  boolean := false;
BEGIN
    applied_kinds := NULL;
    applied_actions := NULL;
    applied_rows := NULL;
    applied_events := NULL;
    IF apply THEN
        BEGIN
            -- A statement whose plan does not depend on the batch's size, so PostgreSQL plans it once per session.
            -- Before, the batch's size was part of its estimate, and it was planned again for every batch: about
            -- 240 us each, some 20 us per SET at saturation.
            SELECT array_agg(n.batch_index ORDER BY n.batch_index), array_agg(n.event_id ORDER BY n.batch_index)
              INTO new_rows, new_ids
              FROM risc_insert_events(issuers, jtis, types, subs, events, claims, iats, statuses, true, NOT enforce, traceparents) AS n;
            -- Each batch row's new event id, NULL for a SET already stored (its actions are not applied again).
            row_ids := array_fill(NULL::bigint, ARRAY[cardinality(issuers)]);
            FOR i IN 1 .. coalesce(cardinality(new_rows), 0) LOOP
                row_ids[new_rows[i]] := new_ids[i];
            END LOOP;
            SELECT coalesce(array_agg(t.kind), '{}'), coalesce(array_agg(t.actions_recorded), '{}'),
                   coalesce(array_agg(t.rows_changed), '{}'), coalesce(array_agg(t.applied_event), '{}')
              INTO applied_kinds, applied_actions, applied_rows, applied_events
              FROM risc_apply_actions(actions, coalesce(row_ids, '{}'), '{}', enforce) AS t;
            applied := true;
        EXCEPTION WHEN OTHERS THEN
            -- One failing action must not cost the batch its storage: it is stored pending, for a worker.
            RAISE WARNING 'applying a batch on receipt failed, stored for the worker: %', SQLERRM;
            applied_kinds := NULL;
            applied_actions := NULL;
            applied_rows := NULL;
            applied_events := NULL;
        END;
    END IF;
    IF NOT applied THEN
        SELECT array_agg(batch_index) INTO new_rows
          FROM risc_insert_events(issuers, jtis, types, subs, events, claims, iats, statuses, false, false, traceparents);
    END IF;
    stored := new_rows;
    COMMIT;
END
$$;
