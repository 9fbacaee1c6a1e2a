-- pgsched schema, version 2: what operators read. Replicas record the jobs they run (and
-- their schedules) in job_state, so commands and pages without the APP know every job.
ALTER TABLE {schema}.job_state ADD COLUMN IF NOT EXISTS schedule text;
ALTER TABLE {schema}.job_state ADD COLUMN IF NOT EXISTS seen_at timestamptz;
ALTER TABLE {schema}.job_state ADD COLUMN IF NOT EXISTS seen_by text;

-- Per-job summaries (status, metrics, the status page) read only these.
CREATE INDEX IF NOT EXISTS cron_executions_job_plan_idx
    ON {schema}.cron_executions (job_name, plan_time DESC);
CREATE INDEX IF NOT EXISTS cron_executions_success_idx
    ON {schema}.cron_executions (job_name, finished_at) WHERE status = 'SUCCESS';
CREATE INDEX IF NOT EXISTS cron_executions_failed_final_idx
    ON {schema}.cron_executions (job_name) WHERE status = 'FAILED' AND next_retry_at IS NULL;
CREATE INDEX IF NOT EXISTS cron_executions_created_idx
    ON {schema}.cron_executions (created_at DESC);
