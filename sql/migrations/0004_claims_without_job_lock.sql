-- pgsched schema, version 4: claims without a job-wide lock.
-- Replicas claim one job concurrently, so overlap="forbid" ("no two executions of a (job,
-- scope) running at once") is kept by the database: a claim marks the row it starts for a
-- scope `exclusive`, and at most one exclusive RUNNING row may exist per (job, scope). A
-- second claimer's INSERT ... ON CONFLICT DO NOTHING then skips the scope, whether the first
-- claim has committed or not. A claim takes at most one row per scope under "forbid".
ALTER TABLE {schema}.cron_executions ADD COLUMN IF NOT EXISTS exclusive boolean NOT NULL DEFAULT false;
CREATE UNIQUE INDEX IF NOT EXISTS cron_executions_one_exclusive_idx
    ON {schema}.cron_executions (job_name, scope_kind, scope_id)
    WHERE status = 'RUNNING' AND exclusive;
