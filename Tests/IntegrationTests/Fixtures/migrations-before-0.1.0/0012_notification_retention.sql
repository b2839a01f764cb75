-- Retention (RISC_EVENT_RETENTION_DAYS) also deletes delivered notifications older than the retention; pending
-- and dead ones stay (still to deliver, or to replay). A BRIN index finds the old ones, as for events: nearly
-- free on each insert, where a B-tree would take an entry for every version of every notification.
CREATE INDEX risc_notifications_created_brin ON risc_notifications USING brin (created_at);
