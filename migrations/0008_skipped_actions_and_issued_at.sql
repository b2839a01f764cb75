-- A state change the ordering rules skipped (an account-enabled or -disabled older than the account state) is
-- recorded and marked `skipped`, and never notified: a subscriber that mirrors account state would act on it, and
-- re-enable an account that a newer event disabled.
ALTER TABLE risc_event_actions ADD COLUMN skipped boolean NOT NULL DEFAULT false;
-- Those recorded before: found by what they said of themselves. Their notifications not yet delivered go (a
-- subscriber that was down would otherwise still be told, and a dead one could be replayed).
UPDATE risc_event_actions SET skipped = true
 WHERE kind IN ('enable_sign_in', 'disable_sign_in') AND rows_affected = 0
   AND detail LIKE '%skipped, the account state is newer than the event';
DELETE FROM risc_notifications n USING risc_event_actions a
 WHERE n.action_id = a.id AND a.skipped AND n.status <> 'delivered';
-- Each notification says when its event was issued (the SET's iat), so a subscriber can order what it hears itself.
ALTER TABLE risc_notifications ADD COLUMN event_issued_at timestamptz;
-- Those still to be sent (or sent again) say it too. Delivered ones keep the body they were delivered with.
UPDATE risc_notifications n SET event_issued_at = e.issued_at
  FROM risc_events e WHERE e.id = n.event_id AND n.status <> 'delivered';
