-- pgbench: one call of risc_apply_actions with 32 sessions-revoked actions, each for a new user and an existing
-- event (ids 1 to 200,000 must exist). See docs/benchmarks.md, "Foreign keys on the ingest path".
\set base random(1, 199000)
SELECT count(*) FROM risc_apply_actions((SELECT jsonb_agg(jsonb_build_object('event', :base + k, 'position', 0, 'kind', 'revoke_sessions', 'sub', 'u-' || :base || '-' || k || '-' || random())) FROM generate_series(1,32) k));
