-- Every transaction that wrote notifications checked each row against its subscriber through this foreign key, and
-- share-locked the subscriber's row to do it: the one row that every ingest batch locked at once, so each new
-- holder made a new MultiXact and rewrote the row's lock (pgbench, 16 clients, 32 notifications a transaction,
-- fsync on: about 1,600 transactions/s with the key, 2,100 without). Removing a subscriber now removes its
-- notifications itself (routines/risc_subscriber_removed), as the key's ON DELETE CASCADE did.
ALTER TABLE risc_notifications DROP CONSTRAINT risc_notifications_subscriber_id_fkey;
