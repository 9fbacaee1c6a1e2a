-- pgsched schema, version 13: the ledger's partitioning, second step. Validates the bound
-- migration 12 put on the old table: a scan of the whole table, under a SHARE UPDATE
-- EXCLUSIVE lock (replicas keep reading and writing it meanwhile), in a transaction of its
-- own so that migration 14's strong lock is held only for catalog changes.
-- Attempts name their execution's plan from version 14 on, and go with its partition; the FK
-- cannot stay (a partitioned table has no unique index on id alone), and goes first so that
-- setting rows aside below does not cascade to their attempts.
ALTER TABLE {schema}.cron_attempts DROP CONSTRAINT IF EXISTS cron_attempts_execution_id_fkey;

DO $$
DECLARE
    ledger regclass := to_regclass((SELECT relnamespace::regnamespace::text
                                    FROM pg_class
                                    WHERE oid = (SELECT tableoid FROM {schema}.cron_partitioning
                                                 LIMIT 1)) || '.cron_executions');
BEGIN
    -- Rows planned past legacy_until (one-offs and backfills ahead, written before version 12)
    -- wait in a table of their own for migration 14, which puts them in the partitioned
    -- ledger (ids, leases and all). A seq scan, under the same weak lock.
    IF (SELECT relkind FROM pg_class WHERE oid = ledger) = 'r' THEN
        CREATE TABLE IF NOT EXISTS {schema}.cron_executions_ahead
            (LIKE {schema}.cron_executions INCLUDING DEFAULTS);
        WITH moved AS (
            DELETE FROM {schema}.cron_executions
            WHERE plan_time >= (SELECT legacy_until FROM {schema}.cron_partitioning)
            RETURNING *
        )
        INSERT INTO {schema}.cron_executions_ahead SELECT * FROM moved;
    END IF;
    IF EXISTS (SELECT 1 FROM pg_constraint
               WHERE conrelid = ledger AND conname = 'cron_executions_legacy_bound'
                 AND NOT convalidated) THEN
        EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT cron_executions_legacy_bound', ledger);
    END IF;
END
$$;
