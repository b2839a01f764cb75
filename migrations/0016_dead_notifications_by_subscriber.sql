-- A subscriber's dead notifications, found without reading the outbox: removing a subscriber deletes them
-- (routines/risc_subscriber_removed), and `subscribers list` counts them. Every notification is inserted pending,
-- so this index costs an insert nothing; a row enters it only when it dies.
CREATE INDEX risc_notifications_dead ON risc_notifications (subscriber_id, id) WHERE status = 'dead';
