-- The procedure binaries of an earlier release call; the service now calls risc_ingest_batch, which takes shadow
-- mode and trace contexts besides, and returns each event's actions apart. This one stays exactly as it was in
-- what it takes and returns: a CALL prepared on an older `serve`'s connections must still answer while an upgrade
-- rolls out. It passes its calls on, enforcing and untraced, as those binaries expect; its applied_* arrays may
-- name a kind more than once (once per event), which they add up.
CREATE OR REPLACE PROCEDURE risc_ingest_events(
    issuers text[], jtis text[], types text[], subs text[], events text[], claims text[], iats float8[],
    statuses text[], actions jsonb, apply boolean,
    INOUT stored bigint[] DEFAULT NULL,
    INOUT applied_kinds text[] DEFAULT NULL, INOUT applied_actions bigint[] DEFAULT NULL,
    INOUT applied_rows bigint[] DEFAULT NULL)
LANGUAGE plpgsql AS $$
DECLARE
    applied_events bigint[];
BEGIN
    CALL risc_ingest_batch(issuers, jtis, types, subs, events, claims, iats, statuses, actions, apply,
                           stored, applied_kinds, applied_actions, applied_rows, applied_events);
END
$$;
