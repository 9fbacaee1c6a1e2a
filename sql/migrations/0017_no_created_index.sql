-- pgsched schema, version 17: the ledger loses its index on created_at. It served one read,
-- `pgsched runs` (and the API's run list) in creation order, and cost every execution two
-- index entries (the claim's insert and the terminal update, which is never HOT) and about
-- 40 bytes a row at rest. The run list is now ordered by plan time, newest plan first, read
-- through the indexes that lead with the job (job_plan, the plan key, the partial ones).
-- Dropping a partitioned index takes an ACCESS EXCLUSIVE lock on the ledger (then on each
-- partition) for a catalog change. A lock request waiting for a long transaction (a
-- transactional run holds the ledger for its whole run) would queue every replica's
-- statements behind it: this waits a second at most, and `migrate` tries again a second
-- later, for up to ten minutes.
SET LOCAL lock_timeout = '1s';
DROP INDEX IF EXISTS {schema}.cron_executions_created_idx;
