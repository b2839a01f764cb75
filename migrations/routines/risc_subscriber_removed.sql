-- A subscriber's notifications go with it; risc_notifications keeps no foreign key to it (migration 0015). Every
-- transaction that writes notifications holds a share lock on the rows of the subscribers it notifies until it ends
-- (risc_notify_subscribers). Deleting a subscriber's row waits for those transactions, so when this runs, at the end
-- of the removing statement, each has committed or rolled back, and its notifications are found here: in READ
-- COMMITTED a VOLATILE function's statement takes a snapshot of its own, now. Under REPEATABLE READ or SERIALIZABLE
-- it would read the transaction's older snapshot and miss them, so a removal there is refused. A transaction that
-- reaches the row later finds it gone and skips it. So no notification outlives its subscriber, and an action
-- committed meanwhile still commits.
-- The leases of the notifications removed are left, as the key's cascade left them: a lease is reached only from its
-- notification, ids are never reused, and deleting them here would lock leases after notifications, the reverse of a
-- dispatcher's record, which could deadlock with it.
CREATE OR REPLACE FUNCTION risc_subscriber_removed() RETURNS trigger LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'remove subscribers in a READ COMMITTED transaction: under %, notifications written meanwhile would outlive them',
            current_setting('transaction_isolation') USING ERRCODE = 'serialization_failure';
    END IF;
    DELETE FROM risc_notifications n USING removed_subscribers r WHERE n.subscriber_id = r.id;
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
