-- Notifications to the app's own services (SPEC §10): a transactional outbox.

-- Who is told. `actions` NULL means every notified kind. The secret signs deliveries (Standard Webhooks), so it
-- is kept as given: a hash could not sign. `configured` rows are kept in step with RISC_SUBSCRIBERS (one per
-- URL); the others are added and removed by operators.
CREATE TABLE risc_subscribers (
    id         bigserial   PRIMARY KEY,
    url        text        NOT NULL,
    secret     text        NOT NULL,
    actions    text[],
    configured boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX risc_subscribers_configured_url ON risc_subscribers (url) WHERE configured;

-- One row per action and matching subscriber. The body is rebuilt from these columns on every attempt, so
-- every retry sends the same bytes under the same webhook_id. `sub` is '' when the action names no user;
-- delivery is ordered per (subscriber_id, sub) by id.
-- event_id and action_id are plain numbers: retention deletes old events and actions, and a delivered
-- notification keeps saying what caused it.
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

-- Written by the statement that records actions, so in its transaction: a notification exists if and only
-- if its action committed, on every path (the worker, or the inbox applying on receipt). The kinds are
-- ActionKind.notified. The SET's first event type names the event (Google's SETs carry one event).
CREATE FUNCTION risc_notify_subscribers() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM risc_subscribers) THEN
        RETURN NULL;
    END IF;
    INSERT INTO risc_notifications (subscriber_id, action_id, kind, sub, count, event_id, event_jti, event_type, occurred_at)
    SELECT s.id, a.id, a.kind, coalesce(a.sub, ''), a.rows_affected, a.event_id, e.jti, coalesce(e.event_types[1], ''),
           a.applied_at
      FROM recorded_actions a
      JOIN risc_events e ON e.id = a.event_id
      JOIN risc_subscribers s ON s.actions IS NULL OR a.kind = ANY (s.actions)
     WHERE a.kind IN ('revoke_sessions', 'delete_grants', 'delete_grant_by_prefix', 'delete_grant_by_hash',
                      'disable_sign_in', 'enable_sign_in', 'flag_for_review', 'require_credential_change')
     ORDER BY a.id, s.id;
    IF FOUND THEN
        PERFORM pg_notify('risc_notifications', '');
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER risc_event_actions_notify
    AFTER INSERT ON risc_event_actions REFERENCING NEW TABLE AS recorded_actions
    FOR EACH STATEMENT EXECUTE FUNCTION risc_notify_subscribers();
