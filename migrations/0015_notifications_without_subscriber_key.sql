-- Every notification was checked against its subscriber through this foreign key, a query of its own per row, and an
-- action committed while its subscriber was being removed failed on it (the row it named was deleted), and with it
-- the batch of SETs it belonged to. risc_notify_subscribers now share-locks the subscribers it notifies as it reads
-- them, and skips one being removed; a removal takes the subscriber's notifications itself
-- (routines/risc_subscriber_removed), as the key's ON DELETE CASCADE did.
ALTER TABLE risc_notifications DROP CONSTRAINT risc_notifications_subscriber_id_fkey;
