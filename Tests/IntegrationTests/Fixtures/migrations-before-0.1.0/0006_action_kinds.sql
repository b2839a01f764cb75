-- The kinds of action an event records, held to the same list as the code (`ActionKind`; a test compares
-- them): a misspelt kind fails here instead of being stored.
ALTER TABLE risc_event_actions ADD CONSTRAINT risc_event_actions_kind CHECK (kind IN (
    'revoke_sessions', 'delete_grants', 'delete_grant_by_prefix', 'delete_grant_by_hash', 'disable_sign_in',
    'enable_sign_in', 'flag_for_review', 'require_credential_change', 'record_verification', 'skip',
    'ambiguous_token_identifier'
));
