-- Shared Signals transmitters besides Google's (which stays configured by RISC_CONFIGURATION_URL and is listed as the
-- built-in `google`), each with the one stream the service creates and manages at it.
CREATE TABLE risc_transmitters (
    name                  text        PRIMARY KEY CHECK (name ~ '^[a-z0-9-]{1,40}$' AND name <> 'google'),
    -- The metadata's issuer, checked equal to the one the operator gave: SETs on the stream must carry it as `iss`.
    issuer                text        NOT NULL UNIQUE,
    -- Where the metadata was read, and what it said (jwks_uri, the stream endpoints, critical subject members).
    config_url            text        NOT NULL,
    metadata              jsonb       NOT NULL,
    delivery              text        NOT NULL CHECK (delivery IN ('push', 'poll')),
    events_requested      text[]      NOT NULL,
    -- How the service authorises its calls to the stream endpoints: OAuth client credentials (the client
    -- authentication method named), or a fixed bearer token.
    auth_method           text        NOT NULL
                          CHECK (auth_method IN ('client_secret_basic', 'client_secret_post', 'private_key_jwt', 'bearer')),
    client_id             text,
    scope                 text,
    -- Nil: discovered from the issuer's OAuth metadata when a token is first needed.
    token_endpoint        text,
    -- The client secret, the private key (PEM) or the bearer token, sealed with the vault key (AES-GCM, the name as
    -- authenticated data). Never stored in clear.
    secret_sealed         bytea       NOT NULL,
    secret_key_id         text        NOT NULL,
    -- From RISC_TRANSMITTERS (kept in step with it at start-up), rather than added by an operator.
    configured            boolean     NOT NULL DEFAULT false,
    created_at            timestamptz NOT NULL DEFAULT now(),
    -- The stream, once created (NULL before): its id and audience as the transmitter answered, what it said it
    -- delivers, and for poll the URL to poll.
    stream_id             text,
    stream_audience       text[],
    events_delivered      text[],
    poll_url              text,
    -- Push: SHA-256 of the secret in the authorization header every push must carry; the secret itself is only
    -- ever given to the transmitter.
    push_secret_hash      bytea,
    -- The status the transmitter last reported (status endpoint, or a stream-updated event).
    stream_status         text        CHECK (stream_status IN ('enabled', 'paused', 'disabled')),
    stream_status_reason  text,
    stream_status_at      timestamptz,
    CONSTRAINT risc_transmitters_oauth_client CHECK ((auth_method = 'bearer') = (client_id IS NULL))
);

-- The states of the verifications the service asked a stream for: a verification event must carry one of them, not
-- yet seen (else invalid_state). One without a state is accepted and recorded as an event.
CREATE TABLE risc_stream_verifications (
    transmitter  text        NOT NULL REFERENCES risc_transmitters (name) ON DELETE CASCADE,
    state        text        NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    -- The verification SET that carried it: a redelivery of that SET is accepted again; another SET with the state is not.
    arrived_at   timestamptz,
    arrived_jti  text,
    PRIMARY KEY (transmitter, state)
);
