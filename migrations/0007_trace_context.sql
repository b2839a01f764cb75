-- With tracing on, the W3C traceparent of the request that stored an event, and of a notification's event: a
-- worker's span links back to that request, and a delivery continues its trace. NULL with tracing off.
ALTER TABLE risc_events ADD COLUMN traceparent text;
ALTER TABLE risc_notifications ADD COLUMN traceparent text;
