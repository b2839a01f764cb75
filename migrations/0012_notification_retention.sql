-- Retention (RISC_EVENT_RETENTION_DAYS) also deletes the delivered notifications of the events it deletes; pending
-- and dead ones stay (still to deliver, or to replay). This index finds them by event.
CREATE INDEX risc_notifications_event ON risc_notifications (event_id);
