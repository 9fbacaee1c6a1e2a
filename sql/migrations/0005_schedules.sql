-- pgsched schema, version 5: schedules as data (docs/schedules.md).
-- One row per (dynamic job, scope): its own cadence or cron expression and zone, payload and
-- window. `next_plan_time` is the schedule's first plan not yet claimed (NULL: none left);
-- the partial index lets a tick read only the schedules that are due, however many exist.
CREATE TABLE IF NOT EXISTS {schema}.schedules (
    job_name        text        NOT NULL,
    scope_kind      text        NOT NULL,
    scope_id        text        NOT NULL,
    every_us        bigint,
    cron            text,
    timezone        text        NOT NULL,
    payload         jsonb       NOT NULL DEFAULT '{{}}',
    starts_at       timestamptz,
    ends_at         timestamptz,
    paused          boolean     NOT NULL DEFAULT false,
    next_plan_time  timestamptz,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (job_name, scope_kind, scope_id),
    CHECK ((every_us IS NULL) <> (cron IS NULL)),
    CHECK (every_us IS NULL OR every_us > 0),
    CHECK (starts_at IS NULL OR ends_at IS NULL OR ends_at > starts_at)
);
CREATE INDEX IF NOT EXISTS schedules_due_idx
    ON {schema}.schedules (job_name, next_plan_time)
    WHERE NOT paused AND next_plan_time IS NOT NULL;
-- The schedule's payload as of the claim (run.payload); NULL for code-defined jobs.
ALTER TABLE {schema}.cron_executions ADD COLUMN IF NOT EXISTS payload jsonb;
