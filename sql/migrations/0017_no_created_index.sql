-- pgsched schema, version 17: the ledger loses its index on created_at. It served one read,
-- `pgsched runs` (and the API's run list) in creation order, and cost every execution two
-- index entries (the claim's insert and the terminal update, which is never HOT) and about
-- 24 bytes a row at rest. The run list is now ordered by plan time, newest plan first, read
-- through the indexes that lead with the job (job_plan, the plan key, the partial ones).
-- Dropping a partitioned index takes each partition's lock for a catalog change only.
DROP INDEX IF EXISTS {schema}.cron_executions_created_idx;
