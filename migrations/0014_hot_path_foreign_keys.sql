-- Two foreign keys checked on every row the ingest path writes, each check a query of its own.
--
-- A notification's, to its subscriber, share-locked the subscriber's row to do it: the one row that every ingest
-- batch locked at once, so each new holder made a new MultiXact and rewrote the row's lock (pgbench, 16 clients,
-- 32 notifications a transaction, fsync on: about 1,600 transactions/s with the key, 2,100 without). Removing a
-- subscriber now removes its notifications itself (routines/risc_subscriber_removed), as the key's ON DELETE
-- CASCADE did.
--
-- An action's, to its event, cost about 12 µs of PostgreSQL's time per action, of some 65 that risc_apply_actions
-- spends on a revocation with one notification (pgbench, 2 clients, synchronous_commit off). Only risc_apply_actions
-- writes actions, each for an event it has just read in its transaction: one inserted there (the inbox), a pending
-- one (a worker's), or one an explain rolls back. Retention deletes only finished events, locked, with their
-- actions; a replay makes an event pending again under its row lock before any action is applied.
ALTER TABLE risc_notifications DROP CONSTRAINT risc_notifications_subscriber_id_fkey;
ALTER TABLE risc_event_actions DROP CONSTRAINT risc_event_actions_event_id_fkey;
