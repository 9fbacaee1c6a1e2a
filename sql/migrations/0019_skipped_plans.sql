-- pgsched schema, version 19: the plans a replica decided not to run, and why. One row per
-- span of consecutive skipped plans of a (job, scope) for one reason (first plan, last plan,
-- how many), written in the claim transaction that decided it: a skip that follows the span's
-- last plan extends the row (`pgsched explain`, the job's dashboard page). Retention deletes
-- the spans whose last plan is older than its cutoff (`pgsched prune`), through the index of
-- last plans; spans are few (one per run of skips, not one per plan), so no partitions.
CREATE TABLE IF NOT EXISTS {schema}.cron_skips (
    job_name    text        NOT NULL,
    scope_kind  text        NOT NULL,
    scope_id    text        NOT NULL,
    reason      text        NOT NULL,
    first_plan  timestamptz NOT NULL,
    last_plan   timestamptz NOT NULL,
    plans       integer     NOT NULL CHECK (plans >= 1),
    recorded_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (job_name, scope_kind, scope_id, first_plan, reason),
    CHECK (first_plan <= last_plan),
    CHECK (reason IN ('superseded', 'max_lateness', 'paused', 'overlap', 'excluded',
                      'outside_window'))
);
-- The extension of a span (its scope and reason, ending at the plan before the new skip), and
-- a scope's spans up to a plan (explain): by last plan.
CREATE INDEX IF NOT EXISTS cron_skips_scope_last_idx
    ON {schema}.cron_skips (job_name, scope_kind, scope_id, reason, last_plan);
-- A job's spans across its scopes over a window (explain of a whole job, the dashboard), and
-- retention.
CREATE INDEX IF NOT EXISTS cron_skips_job_last_idx ON {schema}.cron_skips (job_name, last_plan);
CREATE INDEX IF NOT EXISTS cron_skips_last_idx ON {schema}.cron_skips (last_plan);
-- When a job (or a schedule) was last paused and resumed: a claim after a resume records the
-- plans that fell due in between as `paused` rather than letting catch-up pick among them.
ALTER TABLE {schema}.job_state ADD COLUMN IF NOT EXISTS paused_at timestamptz;
ALTER TABLE {schema}.job_state ADD COLUMN IF NOT EXISTS resumed_at timestamptz;
ALTER TABLE {schema}.schedules ADD COLUMN IF NOT EXISTS paused_at timestamptz;
ALTER TABLE {schema}.schedules ADD COLUMN IF NOT EXISTS resumed_at timestamptz;
