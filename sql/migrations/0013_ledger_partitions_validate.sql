-- pgsched schema, version 13: the ledger's partitioning, second step. Validates the bound
-- migration 12 put on the old table: a scan of the whole table, under a SHARE UPDATE
-- EXCLUSIVE lock (replicas keep reading and writing it meanwhile), in a transaction of its
-- own so that migration 14's strong lock is held only for catalog changes.
DO $$
DECLARE
    ledger regclass := to_regclass((SELECT relnamespace::regnamespace::text
                                    FROM pg_class
                                    WHERE oid = (SELECT tableoid FROM {schema}.cron_partitioning
                                                 LIMIT 1)) || '.cron_executions');
BEGIN
    IF EXISTS (SELECT 1 FROM pg_constraint
               WHERE conrelid = ledger AND conname = 'cron_executions_legacy_bound'
                 AND NOT convalidated) THEN
        EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT cron_executions_legacy_bound', ledger);
    END IF;
END
$$;
