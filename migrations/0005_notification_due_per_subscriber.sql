-- The dispatcher claims one subscriber's due notifications at a time. With the subscriber first, that claim
-- is one ordered range of this index, which PostgreSQL prefers whatever its statistics say; with
-- (next_attempt_at, id) alone, a table not yet analysed was planned as a sort of every pending row of the
-- subscriber on every claim (a burst's outbox then drained at a sixth of its speed until autovacuum ran).
DROP INDEX risc_notifications_pending_due;
CREATE INDEX risc_notifications_pending_due ON risc_notifications (subscriber_id, next_attempt_at, id) WHERE status = 'pending';
