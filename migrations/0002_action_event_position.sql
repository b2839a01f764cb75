-- Which event of its SET caused each action (0-based, in the order of the SET's events and of
-- risc_events.event_types), so that a notification names that event's type. NULL on actions recorded before.
ALTER TABLE risc_event_actions ADD COLUMN event_position integer;
