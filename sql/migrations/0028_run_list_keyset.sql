-- pgsched schema, version 28: the run list pages by keyset, (plan_time DESC, job, scope kind,
-- scope id), the last row of a page its `after`. Each job's rows are read in that order
-- through an index that has it: one plan's fan-out across scopes is then never sorted to
-- return a page of it, and a page that ends inside one plan's scopes goes on from the next
-- scope. The index replaces job_plan (job_name, plan_time DESC), whose every read it serves
-- as well, so a row still has one such entry to write; but it is larger: job_plan stored a
-- plan's fan-out deduplicated (about 8 bytes a row), this one has an entry per row (about
-- 100 bytes a row with a 1,000-scope fan-out inserted in plan order, its pages half full as
-- the plan key's are; 59 freshly built). Without it the run list is still right, each page
-- sorting one plan's fan-out per job instead.
-- Building an index on the ledger takes a SHARE lock on each partition (writes wait for the
-- build); the lock request itself waits a second at most, and `migrate` tries again a second
-- later, for up to ten minutes (as migrations 17 and 26).
SET LOCAL lock_timeout = '1s';
CREATE INDEX IF NOT EXISTS cron_executions_job_plan_scope_idx
    ON {schema}.cron_executions (job_name, plan_time DESC, scope_kind, scope_id);
DROP INDEX IF EXISTS {schema}.cron_executions_job_plan_idx;
