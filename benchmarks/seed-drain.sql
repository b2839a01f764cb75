-- Queues :events mixed events (every action) for the worker-drain benchmark, with real state to act on:
-- every user d-N has a session, and users of the tokens-revoked and token-revoked kinds have a grant.
-- Event i names user d-((i - 1) % :users + 1); :users defaults to :events (a user per event).
\set ON_ERROR_STOP on
\if :{?users}
\else
\set users :events
\endif
CREATE TEMP TABLE kinds (k int PRIMARY KEY, uri text, reason text);
INSERT INTO kinds VALUES
  (0, 'https://schemas.openid.net/secevent/risc/event-type/sessions-revoked', NULL),
  (1, 'https://schemas.openid.net/secevent/oauth/event-type/tokens-revoked', NULL),
  (2, 'https://schemas.openid.net/secevent/oauth/event-type/token-revoked', NULL),
  (3, 'https://schemas.openid.net/secevent/risc/event-type/account-disabled', 'hijacking'),
  (4, 'https://schemas.openid.net/secevent/risc/event-type/account-disabled', 'bulk-account'),
  (5, 'https://schemas.openid.net/secevent/risc/event-type/account-enabled', NULL),
  (6, 'https://schemas.openid.net/secevent/risc/event-type/account-credential-change-required', NULL),
  (7, 'https://schemas.openid.net/secevent/risc/event-type/verification', NULL);

INSERT INTO risc_users (sub, last_sign_in_at) SELECT 'd-' || i, now() FROM generate_series(1, :users) AS i;
INSERT INTO risc_sessions (token_hash, sub, created_at, expires_at)
SELECT sha256(('drain-session-' || i)::bytea), 'd-' || i, now() - interval '1 minute', now() + interval '1 day'
FROM generate_series(1, :users) AS i;
INSERT INTO risc_grants (id, sub, client_id, token_prefix, token_hash, ciphertext, vault_key_id)
SELECT gen_random_uuid(), 'd-' || ((i - 1) % :users + 1), 'bench-client', left('1//drain-' || i || '-xxxxxxxx', 16),
       replace(encode(sha512(sha512(('1//drain-' || i)::bytea)), 'base64'), E'\n', ''),
       sha256(i::text::bytea), 'bench'
FROM generate_series(1, :events) AS i WHERE i % 8 IN (1, 2);

INSERT INTO risc_events (issuer, jti, event_types, subject_sub, events, claims, issued_at)
SELECT 'https://transmitter.test/', 'drain-' || i, ARRAY[k.uri], CASE WHEN k.k NOT IN (2, 7) THEN 'd-' || ((i - 1) % :users + 1) END,
       jsonb_build_array(jsonb_strip_nulls(jsonb_build_object(
           'type', k.uri, 'reason', k.reason,
           'state', CASE WHEN k.k = 7 THEN 'state-' || i END,
           'subject', CASE
               WHEN k.k = 2 THEN jsonb_build_object(
                   'format', 'oauth_token', 'token_type', 'refresh_token', 'token_identifier_alg', 'hash_base64_sha512_sha512',
                   'token', replace(encode(sha512(sha512(('1//drain-' || i)::bytea)), 'base64'), E'\n', ''))
               WHEN k.k = 7 THEN NULL
               ELSE jsonb_build_object('format', 'iss_sub', 'iss', 'https://accounts.google.com', 'sub', 'd-' || ((i - 1) % :users + 1))
           END))),
       '{"aud": "bench-client"}'::json, now() - interval '1 second' * (:events - i)
FROM generate_series(1, :events) AS i JOIN kinds k ON k.k = i % 8;
VACUUM ANALYZE;
CHECKPOINT;
