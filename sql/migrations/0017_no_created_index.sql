-- pgsched schema, version 17: the ledger loses its index on created_at. It served one read,
-- `pgsched runs` (and the API's run list) in creation order, and cost every execution two
-- index entries (the claim's insert and the terminal update, which is never HOT) and about
-- 40 bytes a row at rest. The run list is now ordered by plan time, newest plan first, read
-- through the indexes that lead with the job (job_plan, the plan key, the partial ones).
-- Dropping a partitioned index takes an ACCESS EXCLUSIVE lock on the ledger for a catalog
-- change. A lock request waiting for a long transaction (a transactional run holds the
-- ledger for its whole run) would queue every replica's claim behind it, so each try waits
-- at most a second and then makes way for a second, for up to ten minutes.
DO $$
DECLARE
    was text := current_setting('lock_timeout');
BEGIN
    FOR i IN 1..300 LOOP
        BEGIN
            PERFORM set_config('lock_timeout', '1s', true);
            DROP INDEX IF EXISTS {schema}.cron_executions_created_idx;
            PERFORM set_config('lock_timeout', was, true);
            RETURN;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM pg_sleep(1);  -- the block's rollback restored lock_timeout
        END;
    END LOOP;
    RAISE EXCEPTION 'could not lock the ledger to drop its created_at index for ten minutes'
        USING HINT = 'a long transaction holds cron_executions; run pgsched migrate again';
END
$$;
