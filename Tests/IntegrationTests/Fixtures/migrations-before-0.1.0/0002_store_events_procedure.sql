-- Stores a batch of SETs and commits before returning, in one round trip.
--
-- Over the extended protocol PostgreSQL commits an implicit transaction at Sync, after the rows have
-- been returned, so a client reading the rows cannot tell whether the commit succeeded. A procedure
-- called at top level may COMMIT itself: when CALL answers, the batch is durable (or the call failed).
-- Columns travel as parallel arrays; `stored` returns the 1-based positions of the rows that were new
-- (NULL when all were duplicates).
CREATE PROCEDURE risc_store_events(
    issuers text[], jtis text[], types text[], subs text[], events text[], claims text[],
    iats float8[], statuses text[], INOUT stored bigint[] DEFAULT NULL)
LANGUAGE plpgsql AS $$
BEGIN
    WITH inserted AS (
        INSERT INTO risc_events (issuer, jti, event_types, subject_sub, events, claims, issued_at, status, completed_at)
        SELECT i.issuer, i.jti, ARRAY(SELECT jsonb_array_elements_text(i.types::jsonb)), NULLIF(i.sub, ''),
               i.events::jsonb, i.claims::jsonb, to_timestamp(i.iat), i.status,
               CASE WHEN i.status = 'ignored' THEN now() END
        FROM unnest(issuers, jtis, types, subs, events, claims, iats, statuses)
             AS i(issuer, jti, types, sub, events, claims, iat, status)
        ON CONFLICT (issuer, jti) DO NOTHING
        RETURNING issuer, jti
    )
    SELECT array_agg(k.position) INTO stored
    FROM inserted
    JOIN unnest(issuers, jtis) WITH ORDINALITY AS k(issuer, jti, position)
      ON k.issuer = inserted.issuer AND k.jti = inserted.jti;
    COMMIT;
END
$$;
