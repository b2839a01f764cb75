-- Inserts a batch (parallel arrays, one element per SET) and returns, for each new row, its 1-based place in the
-- batch and its id. A (issuer, jti) already stored, or repeated in the batch, is inserted once. Rows go in in
-- (issuer, jti) order, so two batches holding the same SETs wait on each other in one order. With `applied`,
-- pending rows are stored done: their actions are applied in the same transaction (with `shadow` too, in shadow
-- mode: they are marked for a later replay). `traceparents`, when given, holds each SET's request's trace context.
-- PL/pgSQL, not SQL: a SQL function's body is parsed and planned again on every call, which cost a sixth of
-- PostgreSQL's CPU at saturation; PL/pgSQL keeps the plan for the session.
-- Earlier signatures: a second overload would make a call ambiguous.
DROP FUNCTION IF EXISTS risc_insert_events(text[], text[], text[], text[], text[], text[], float8[], text[], boolean);
DROP FUNCTION IF EXISTS risc_insert_events(text[], text[], text[], text[], text[], text[], float8[], text[], boolean, boolean);
CREATE OR REPLACE FUNCTION risc_insert_events(
    issuers text[], jtis text[], types text[], subs text[], events text[], claims text[], iats float8[],
    statuses text[], applied boolean, shadow boolean DEFAULT false, traceparents text[] DEFAULT NULL
) RETURNS TABLE (batch_index bigint, event_id bigint) LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT * FROM unnest(issuers, jtis, types, subs, events, claims, iats, statuses) WITH ORDINALITY
            AS i(issuer, jti, types, sub, events, claims, iat, status, n)
    ), inserted AS (
        INSERT INTO risc_events (issuer, jti, event_types, subject_sub, events, claims, issued_at, status, attempts,
                                 completed_at, shadow, traceparent)
        SELECT i.issuer, i.jti, ARRAY(SELECT jsonb_array_elements_text(i.types::jsonb)), NULLIF(i.sub, ''),
               i.events::jsonb, i.claims::json, to_timestamp(i.iat),
               CASE WHEN applied AND i.status = 'pending' THEN 'done' ELSE i.status END,
               CASE WHEN applied AND i.status = 'pending' THEN 1 ELSE 0 END,
               CASE WHEN i.status = 'ignored' OR applied THEN now() END,
               applied AND shadow AND i.status = 'pending', NULLIF(traceparents[i.n], '')
          FROM input i ORDER BY i.issuer, i.jti
        ON CONFLICT (issuer, jti) DO NOTHING
        RETURNING id, issuer, jti
    )
    SELECT DISTINCT ON (inserted.id) input.n, inserted.id
      FROM inserted JOIN input ON input.issuer = inserted.issuer AND input.jti = inserted.jti
     ORDER BY inserted.id, input.n;
END
$$;
