-- A subscriber's notifications go with it; risc_notifications keeps no foreign key to it (migration
-- 0014_hot_path_foreign_keys). Before a subscriber's row is deleted, the removal waits for every transaction still
-- writing notifications and holds off new ones until it commits (SHARE ROW EXCLUSIVE conflicts with their ROW
-- EXCLUSIVE, and with another removal's). A transaction that wrote a notification for the subscriber committed
-- before, so the delete below finds it; one that writes after the removal commits does not see the subscriber (a
-- statement takes its snapshot once its locks are held). So no notification outlives its subscriber, and an action
-- committed meanwhile still commits: under the key it failed on the deleted row. Its leases go too: nothing could
-- record an outcome for them.
CREATE OR REPLACE FUNCTION risc_subscriber_removing() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    LOCK TABLE risc_notifications IN SHARE ROW EXCLUSIVE MODE;
    RETURN OLD;
END
$$;

CREATE OR REPLACE FUNCTION risc_subscriber_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH gone AS (DELETE FROM risc_notifications WHERE subscriber_id = OLD.id RETURNING id)
    DELETE FROM risc_notification_leases WHERE notification_id IN (SELECT id FROM gone);
    RETURN NULL;
END
$$;

CREATE OR REPLACE TRIGGER risc_subscriber_removing BEFORE DELETE ON risc_subscribers
    FOR EACH ROW EXECUTE FUNCTION risc_subscriber_removing();
CREATE OR REPLACE TRIGGER risc_subscriber_removed AFTER DELETE ON risc_subscribers
    FOR EACH ROW EXECUTE FUNCTION risc_subscriber_removed();
