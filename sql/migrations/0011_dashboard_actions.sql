-- pgsched schema, version 11: what the dashboard needs beyond the ledger.
-- `actions`: every operator action taken through the HTTP API or the dashboard (who: the
-- label of the token used; what; on which job and target; how it ended), newest first on the
-- page. Only appended to; a new table, so replicas of earlier versions keep running.
CREATE TABLE IF NOT EXISTS {schema}.actions (
    id        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    actor     text        NOT NULL,
    action    text        NOT NULL,
    job_name  text,
    target    text,
    outcome   text        NOT NULL,
    detail    text CHECK (char_length(detail) <= 4000)
);
CREATE INDEX IF NOT EXISTS actions_at_idx ON {schema}.actions (at DESC);
CREATE INDEX IF NOT EXISTS actions_job_idx ON {schema}.actions (job_name, at DESC);
-- A job page's failures, newest first, without walking the job's whole history.
CREATE INDEX IF NOT EXISTS cron_executions_failed_job_idx
    ON {schema}.cron_executions (job_name, finished_at DESC) WHERE status = 'FAILED';
-- A dynamic job's paused schedules, counted (up to a bound) without reading the others.
CREATE INDEX IF NOT EXISTS schedules_paused_idx
    ON {schema}.schedules (job_name, scope_kind, scope_id) WHERE paused;
