-- A notification taken for delivery is leased here, not by rewriting its outbox row. A row of the outbox carries
-- five indexes, and each new version of it writes all of them and the WAL; a lease is a row of a small table
-- that is never written to the WAL (unlogged). A notification's outbox row is now written twice: inserted with
-- its action, and updated once with the outcome of its attempt.
-- Unlogged means a crash of PostgreSQL empties the table: every lease ends, and what was in flight is sent again
-- (at least once, with the same webhook-id). `attempt` is the attempt the lease is for; the outcome is recorded
-- only by the holder of that attempt, so a dispatcher whose lease ran out, and whose row was taken again, changes
-- nothing.
CREATE UNLOGGED TABLE risc_notification_leases (
    notification_id bigint      PRIMARY KEY,
    attempt         integer     NOT NULL,
    until           timestamptz NOT NULL
);

-- A random UUID per row is unique without an index that every insert of the outbox had to write; nothing looks a
-- notification up by its webhook-id.
ALTER TABLE risc_notifications DROP CONSTRAINT risc_notifications_webhook_id_key;
