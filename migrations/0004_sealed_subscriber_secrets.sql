-- Subscribers' secrets are sealed with the vault key, as refresh tokens are (AES-GCM, the subscriber's id as
-- authenticated data): `secret` (clear) is NULL once sealed; a row from before is sealed when a dispatcher with the
-- key starts, or by `vault rotate`. A secret rotated out stays valid until `previous_secret_until` (24 hours), so
-- each delivery meanwhile carries both signatures.
ALTER TABLE risc_subscribers ALTER COLUMN secret DROP NOT NULL;
ALTER TABLE risc_subscribers
    ADD COLUMN secret_sealed          bytea,
    ADD COLUMN secret_key_id          text,
    ADD COLUMN previous_secret_sealed bytea,
    ADD COLUMN previous_secret_key_id text,
    ADD COLUMN previous_secret_until  timestamptz;
ALTER TABLE risc_subscribers ADD CONSTRAINT risc_subscribers_one_secret CHECK ((secret IS NULL) <> (secret_sealed IS NULL));
