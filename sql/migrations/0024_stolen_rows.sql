-- pgsched schema, version 24: a row remembers that a steal after a dead holder took it
-- over. The steal's attempt is the one the ledger allows past max_attempts, so a handler
-- failure of a stolen row is retried while attempt < max_attempts + 1: the crash does not use
-- up one of the handler's retries. A constant NOT NULL default is a catalog change only
-- (PostgreSQL 11 and later: no rewrite of the ledger), on the partitioned table and every
-- partition alike; IF NOT EXISTS makes it a no-op when run again, and the migrate lock
-- serialises replicas migrating at once. Replicas of the previous version keep running (they
-- never set it: their steals are counted as before). ADD COLUMN locks the ledger (ACCESS
-- EXCLUSIVE) for that catalog change, and a transactional run holds it for its whole run: this
-- waits a second at most, and `migrate` tries again a second later (as migration 18).
SET LOCAL lock_timeout = '1s';
ALTER TABLE {schema}.cron_executions ADD COLUMN IF NOT EXISTS stolen boolean NOT NULL DEFAULT false;
