-- pgsched schema, version 1. {schema} is replaced by the configured schema (quoted identifier).
CREATE SEQUENCE IF NOT EXISTS {schema}.fencing_seq;

CREATE TABLE IF NOT EXISTS {schema}.cron_executions (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    job_name       text NOT NULL,
    scope_kind     text NOT NULL DEFAULT 'global',
    scope_id       text NOT NULL DEFAULT 'global',
    plan_time      timestamptz NOT NULL,
    trigger        text NOT NULL CHECK (trigger IN ('schedule', 'manual', 'backfill')),
    status         text NOT NULL
                   CHECK (status IN ('PENDING', 'RUNNING', 'SUCCESS', 'FAILED', 'CANCELLED')),
    attempt        integer NOT NULL DEFAULT 1,
    max_attempts   integer NOT NULL DEFAULT 1,
    next_retry_at  timestamptz,
    runner_id      text,
    lease_token    uuid NOT NULL DEFAULT gen_random_uuid(),
    fencing_token  bigint NOT NULL DEFAULT nextval('{schema}.fencing_seq'),
    heartbeat_at   timestamptz,
    stale_after    timestamptz,
    started_at     timestamptz,
    finished_at    timestamptz,
    duration_ms    integer,
    rows_affected  bigint,
    result         jsonb NOT NULL DEFAULT '{{}}',
    error_code     text CHECK (error_code IN ('handler_error', 'run_timeout', 'stale_timeout',
                                              'lease_lost', 'invalid_result', 'shutdown')),
    error_msg      text CHECK (char_length(error_msg) <= 4000),
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT cron_executions_plan_key UNIQUE (job_name, scope_kind, scope_id, plan_time),
    CONSTRAINT cron_executions_attempt_check CHECK (attempt >= 1 AND attempt <= max_attempts)
);

-- The sweeps of every tick read only these partial indexes, so an idle tick stays cheap
-- however many finished rows the table holds.
CREATE INDEX IF NOT EXISTS cron_executions_running_idx
    ON {schema}.cron_executions (job_name, stale_after) WHERE status = 'RUNNING';
CREATE INDEX IF NOT EXISTS cron_executions_retry_idx
    ON {schema}.cron_executions (job_name, next_retry_at) WHERE status = 'FAILED' AND next_retry_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS cron_executions_pending_idx
    ON {schema}.cron_executions (job_name, plan_time) WHERE status = 'PENDING';
-- At most one PENDING manual trigger per (job, scope): a second trigger returns the first.
CREATE UNIQUE INDEX IF NOT EXISTS cron_executions_one_pending_manual_idx
    ON {schema}.cron_executions (job_name, scope_kind, scope_id)
    WHERE status = 'PENDING' AND trigger = 'manual';
CREATE INDEX IF NOT EXISTS cron_executions_finished_idx
    ON {schema}.cron_executions (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS {schema}.job_state (
    job_name    text PRIMARY KEY,
    paused      boolean NOT NULL DEFAULT false,
    updated_at  timestamptz NOT NULL DEFAULT clock_timestamp()
);
