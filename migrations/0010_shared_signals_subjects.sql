-- A Shared Signals `email` subject names the user whose latest verified Google ID token carried the address,
-- ignoring case: found through this index, for the few events that carry one.
CREATE INDEX risc_users_verified_email ON risc_users (lower(email)) WHERE email_verified;

-- A notification of an event from a Shared Signals transmitter names the transmitter and the event's subject as
-- received, so that an app whose users live elsewhere can act on it. NULL for Google's events.
ALTER TABLE risc_notifications ADD COLUMN transmitter text, ADD COLUMN subject jsonb;
