-- pgsched schema, version 18: a steal after a dead holder may take a row one attempt past
-- max_attempts (max_attempts=1 survives one crash of a transactional job), so the ledger's
-- `attempt <= max_attempts` becomes `attempt <= max_attempts + 1`.
-- The new constraint is added NOT VALID: every row already meets the old, stricter one, so
-- a validating scan of the whole ledger (under this migration's ACCESS EXCLUSIVE lock, held
-- to the commit) would find nothing. It is enforced on every row written or updated from the
-- commit on; partitions made later are created with it, validated (they start empty).
-- Every partition's constraint is the parent's (ATTACH made the legacy partition's own one
-- inherited), so it goes and comes with the parent's.
-- Dropping and adding a constraint of a partitioned table locks it and each partition
-- (ACCESS EXCLUSIVE) for a catalog change. A transactional run holds the ledger for its
-- whole run: this waits a second at most, and `migrate` tries again a second later, for up
-- to ten minutes (as migration 17). Concurrent migrators are serialised by the migrate lock;
-- run again, these statements leave the same constraint.
SET LOCAL lock_timeout = '1s';
ALTER TABLE {schema}.cron_executions DROP CONSTRAINT IF EXISTS cron_executions_attempt_check;
ALTER TABLE {schema}.cron_executions ADD CONSTRAINT cron_executions_attempt_check
    CHECK (attempt >= 1 AND attempt <= max_attempts + 1) NOT VALID;
