-- A subscriber's undelivered notifications go with it; risc_notifications keeps no foreign key to it (migration
-- 0015). Every transaction that writes notifications holds a share lock on the rows of the subscribers it notifies
-- until it ends (risc_notify_subscribers). Deleting a subscriber's row waits for those transactions, so when this runs,
-- at the end of the removing statement, each has committed or rolled back, and its notifications are found here: in
-- READ COMMITTED each statement of a VOLATILE function takes a snapshot of its own, now. Under REPEATABLE READ or
-- SERIALIZABLE it would read the transaction's older snapshot and miss them, so a removal there is refused. A
-- transaction that reaches the row later finds it gone and skips it. So no pending or dead notification outlives its
-- subscriber, and an action committed meanwhile still commits.
-- Only pending and dead ones, each through its partial index: the subscriber's row stays locked until the removal
-- commits, and every SET that would notify it waits that long. Taking its delivered notifications too meant reading
-- the whole outbox (no index holds delivered rows by subscriber, and one would cost every insert), seconds with
-- millions of rows, while ingest waited. They are a record of what was sent, and retention deletes them by age, as it
-- deletes the rest; a replay of one finds its subscriber gone and is refused. Pending first: a row a dispatcher
-- records dead meanwhile is found by the second statement, which takes a snapshot after that commit.
-- `= ANY (ARRAY(...))` makes the subscribers' ids, then the rows' ids, index conditions: as a join, a plan
-- made from the outbox's statistics read every pending (or dead) row of every subscriber, and more than a second
-- once another subscriber's backlog had grown since the last ANALYZE. The rows are locked in id order, the order a
-- dispatcher's record locks them in; in the order of an index of pending rows, a removal and a record could each
-- hold a row the other waited for.
-- The leases of the notifications removed are left, as the key's cascade left them: a lease is reached only from its
-- notification, ids are never reused, and deleting them here would lock leases after notifications, the reverse of a
-- dispatcher's record, which could deadlock with it.
CREATE OR REPLACE FUNCTION risc_subscriber_removed() RETURNS trigger LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'remove subscribers in a READ COMMITTED transaction: under %, notifications written meanwhile would outlive them',
            current_setting('transaction_isolation') USING ERRCODE = 'serialization_failure';
    END IF;
    DELETE FROM risc_notifications WHERE id = ANY (ARRAY(
        SELECT id FROM risc_notifications
        WHERE subscriber_id = ANY (ARRAY(SELECT id FROM removed_subscribers)) AND status = 'pending'
        ORDER BY id FOR UPDATE));
    DELETE FROM risc_notifications WHERE id = ANY (ARRAY(
        SELECT id FROM risc_notifications
        WHERE subscriber_id = ANY (ARRAY(SELECT id FROM removed_subscribers)) AND status = 'dead'
        ORDER BY id FOR UPDATE));
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER risc_subscriber_removed
    AFTER DELETE ON risc_subscribers REFERENCING OLD TABLE AS removed_subscribers
    FOR EACH STATEMENT EXECUTE FUNCTION risc_subscriber_removed();

-- TRUNCATE risc_subscribers takes every notification, as TRUNCATE ... CASCADE did under the key (plain TRUNCATE was
-- refused then).
CREATE OR REPLACE FUNCTION risc_subscribers_truncated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE risc_notifications;
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER risc_subscribers_truncated
    AFTER TRUNCATE ON risc_subscribers FOR EACH STATEMENT EXECUTE FUNCTION risc_subscribers_truncated();
