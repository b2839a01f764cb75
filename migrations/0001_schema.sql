-- The schema of risc-receiver 0.1.0: every table and index. The functions, procedures and triggers live in
-- migrations/routines/, one file each, applied again whenever the file changes. A later change to a table is a
-- new numbered file here.

-- Security event tokens as received: one row per (issuer, jti), the unit of work for a worker.
CREATE TABLE risc_events (
    id           bigserial   PRIMARY KEY,
    issuer       text        NOT NULL,
    jti          text        NOT NULL,
    -- Every event-type URI of the SET, as sent (one, in practice).
    event_types  text[]      NOT NULL,
    -- The Google account `sub` the SET is about, when its subject names one.
    subject_sub  text,
    -- The decoded events (typed model), and the payload exactly as signed (never the signature): `json` keeps
    -- the text, where `jsonb` would rewrite numbers and escapes.
    events       jsonb       NOT NULL,
    claims       json        NOT NULL,
    issued_at    timestamptz NOT NULL,
    received_at  timestamptz NOT NULL DEFAULT now(),
    -- pending: new; retry: failed, waiting for run_after; done; ignored: unknown type; dead: out of attempts.
    status       text        NOT NULL DEFAULT 'pending'
                 CHECK (status IN ('pending', 'retry', 'done', 'ignored', 'dead')),
    attempts     integer     NOT NULL DEFAULT 0,
    run_after    timestamptz NOT NULL DEFAULT now(),
    last_error   text,
    completed_at timestamptz,
    CONSTRAINT risc_events_issuer_jti UNIQUE (issuer, jti)
);

CREATE INDEX risc_events_runnable ON risc_events (run_after, id) WHERE status IN ('pending', 'retry');
CREATE INDEX risc_events_subject ON risc_events (subject_sub, id) WHERE subject_sub IS NOT NULL;
-- Retention finds old events without a B-tree to maintain on every insert: rows arrive in received_at order.
CREATE INDEX risc_events_received_brin ON risc_events USING brin (received_at);

-- The users events act on, keyed by Google sub.
CREATE TABLE risc_users (
    sub                        text PRIMARY KEY,
    email                      text,
    email_verified             boolean,
    name                       text,
    picture                    text,
    hd                         text,
    -- Set by account-disabled, cleared by account-enabled. The state is ordered by the iat of the event that
    -- set it, then by that event's arrival (its id) and its place in the SET: an older event delivered late,
    -- or a replay, changes nothing.
    sign_in_disabled           boolean     NOT NULL DEFAULT false,
    disabled_reason            text,
    sign_in_state_at           timestamptz,
    review_required            boolean     NOT NULL DEFAULT false,
    credential_change_required boolean     NOT NULL DEFAULT false,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    -- NULL for a user known only from events: the state is kept for a later sign-in.
    last_sign_in_at            timestamptz,
    updated_at                 timestamptz NOT NULL DEFAULT now(),
    -- The moment up to which the user's sessions were last revoked. An ID token issued (`iat`) at or before it
    -- no longer signs the user in: a hijacker holding one cannot undo the revocation.
    sessions_revoked_before    timestamptz,
    sign_in_state_event        bigint,
    sign_in_state_position     integer
);

-- A session or grant keeps the id of the event that revoked it as a plain number, not a foreign key: retention
-- deletes old events, and checking each deleted event against both tables would scan them every time.
CREATE TABLE risc_sessions (
    id               bigserial   PRIMARY KEY,
    -- SHA-256 of the session token; the token itself is never stored.
    token_hash       bytea       NOT NULL UNIQUE,
    sub              text        NOT NULL REFERENCES risc_users (sub),
    created_at       timestamptz NOT NULL DEFAULT now(),
    expires_at       timestamptz NOT NULL,
    revoked_at       timestamptz,
    revoked_by_event bigint
);

CREATE INDEX risc_sessions_live ON risc_sessions (sub, created_at) WHERE revoked_at IS NULL;

-- The refresh-token vault.
CREATE TABLE risc_grants (
    id               uuid        PRIMARY KEY,
    sub              text        NOT NULL,
    client_id        text        NOT NULL,
    scopes           text[]      NOT NULL DEFAULT '{}',
    -- For matching token-revoked events: the first 16 characters and the padded standard base64 of
    -- SHA-512(SHA-512(token)). Erased with the ciphertext when the grant is revoked.
    token_prefix     text,
    token_hash       text,
    -- AES-GCM combined form (nonce, ciphertext, tag), with the grant id as authenticated data.
    ciphertext       bytea,
    vault_key_id     text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    revoked_at       timestamptz,
    revoked_by_event bigint,
    CONSTRAINT risc_grants_secret_erased CHECK (
        (revoked_at IS NULL AND ciphertext IS NOT NULL) OR
        (revoked_at IS NOT NULL AND ciphertext IS NULL AND token_prefix IS NULL AND token_hash IS NULL))
);

CREATE INDEX risc_grants_sub ON risc_grants (sub) WHERE revoked_at IS NULL;
CREATE INDEX risc_grants_prefix ON risc_grants (token_prefix) WHERE token_prefix IS NOT NULL;
CREATE INDEX risc_grants_hash ON risc_grants (token_hash) WHERE token_hash IS NOT NULL;

-- Every action an event took, with the number of rows it changed.
CREATE TABLE risc_event_actions (
    id            bigserial   PRIMARY KEY,
    event_id      bigint      NOT NULL REFERENCES risc_events (id),
    kind          text        NOT NULL,
    sub           text,
    detail        text,
    rows_affected integer     NOT NULL,
    applied_at    timestamptz NOT NULL DEFAULT now(),
    -- The same list as the code's `ActionKind` (a test compares them): a misspelt kind fails here.
    CONSTRAINT risc_event_actions_kind CHECK (kind IN (
        'revoke_sessions', 'delete_grants', 'delete_grant_by_prefix', 'delete_grant_by_hash', 'disable_sign_in',
        'enable_sign_in', 'flag_for_review', 'require_credential_change', 'record_verification', 'skip',
        'ambiguous_token_identifier'
    ))
);

CREATE INDEX risc_event_actions_event ON risc_event_actions (event_id);

-- The app's services told of each action. `actions` NULL means every notified kind. The secret signs deliveries
-- (Standard Webhooks), so it is kept as given: a hash could not sign. `configured` rows are kept in step with
-- RISC_SUBSCRIBERS (one per URL); the others are added and removed by operators.
CREATE TABLE risc_subscribers (
    id         bigserial   PRIMARY KEY,
    url        text        NOT NULL,
    secret     text        NOT NULL,
    actions    text[],
    configured boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX risc_subscribers_configured_url ON risc_subscribers (url) WHERE configured;

-- The outbox: one row per action and matching subscriber. The body is rebuilt from these columns on every
-- attempt, so every retry sends the same bytes under the same webhook_id. `sub` is '' when the action names no
-- user; delivery is ordered per (subscriber_id, sub) by id. event_id and action_id are plain numbers: retention
-- deletes old events and actions, and a delivered notification keeps saying what caused it.
CREATE TABLE risc_notifications (
    id              bigserial   PRIMARY KEY,
    webhook_id      text        NOT NULL UNIQUE DEFAULT ('msg_' || replace(gen_random_uuid()::text, '-', '')),
    subscriber_id   bigint      NOT NULL REFERENCES risc_subscribers (id) ON DELETE CASCADE,
    action_id       bigint      NOT NULL,
    kind            text        NOT NULL,
    sub             text        NOT NULL,
    count           integer     NOT NULL,
    event_id        bigint      NOT NULL,
    event_jti       text        NOT NULL,
    event_type      text        NOT NULL,
    occurred_at     timestamptz NOT NULL,
    status          text        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts        integer     NOT NULL DEFAULT 0,
    -- When a dispatcher may take it next. A dispatcher that takes it moves this past its delivery timeout:
    -- if it dies mid-delivery, the row comes due again on its own (at least once, never lost).
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    last_attempt_at timestamptz,
    delivered_at    timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
);

-- The oldest pending notification of each (subscriber, user) is the only one that may be sent.
CREATE INDEX risc_notifications_pending_order ON risc_notifications (subscriber_id, sub, id) WHERE status = 'pending';
CREATE INDEX risc_notifications_pending_due ON risc_notifications (next_attempt_at, id) WHERE status = 'pending';
CREATE INDEX risc_notifications_sub ON risc_notifications (sub, id);
-- Retention deletes delivered notifications by age; a BRIN index is nearly free on each insert.
CREATE INDEX risc_notifications_created_brin ON risc_notifications USING brin (created_at);

-- Delivery health: each probe asks Google for a verification SET with a fresh `state`, and records what the
-- management API reported and when (whether) the SET arrived through POST /risc/events.
CREATE TABLE risc_delivery_probes (
    id                bigserial   PRIMARY KEY,
    state             text        NOT NULL UNIQUE,
    -- The start of the prober's process: `stream health` counts the timeouts since the service started.
    prober_started_at timestamptz NOT NULL,
    requested_at      timestamptz NOT NULL DEFAULT now(),
    arrived_at        timestamptz,
    timed_out         boolean     NOT NULL DEFAULT false,
    -- What the management API reported just before; NULL when it could not be read (then `error` says why).
    stream_enabled    boolean,
    delivery_url      text,
    events_requested  text[],
    error             text,
    -- When the probe read the stream from the management API (the row is written after that read): a stream
    -- change at or after this is not reflected in the row.
    stream_read_at    timestamptz
);

-- Stream changes made through `risc-receiver stream update|enable|disable`. What the last probe read from the
-- management API predates a later change: `stream health` says so instead of repeating it, and the prober probes
-- again within a second or two rather than at its next interval.
CREATE TABLE risc_stream_changes (
    id         bigserial   PRIMARY KEY,
    changed_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- What was asked of the management API, e.g. "update https://example.com/risc/events" or "disable".
    change     text        NOT NULL
);
