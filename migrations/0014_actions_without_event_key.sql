-- An action's foreign key to its event was checked on every action row with a query of its own: about 12 µs of
-- PostgreSQL's time per action, of some 65 that risc_apply_actions spends on a revocation with one notification
-- (pgbench, 2 clients, synchronous_commit off). It guarded nothing the path does not: only risc_apply_actions
-- writes actions, each for an event it has just read in its transaction (one inserted there by the inbox, a
-- pending one a worker claimed, or one an explain rolls back). Retention deletes only finished events, locked,
-- with their actions; a replay makes an event pending again under its row lock before any action is applied.
-- Deleting events by hand leaves their actions: delete those first, as retention does.
ALTER TABLE risc_event_actions DROP CONSTRAINT risc_event_actions_event_id_fkey;
