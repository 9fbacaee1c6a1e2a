-- pgsched schema, version 10: each scope's next plan is stored, not derived from history.
-- One cursor per (code-defined job, scope) a replica has planned: its next unclaimed plan,
-- when that plan is due (the plan plus the scope's jitter: a claim reads only due cursors,
-- through the partial index), the schedule the plan was computed from (`spec`; NULL: the
-- next claim computes it again from `last_plan_time`, or from first sight), when the scope
-- was first seen, and its latest claimed scheduled plan. A scope that leaves the fan-out is
-- retired (`retired_at`), not deleted: if it comes back it starts as on first sight, rather
-- than resuming after its plans in the ledger as a scope from an earlier version does.
-- A dynamic job's cursor is its `schedules` row, which gains the latest claimed plan too.
-- Only new objects and a new nullable column: replicas of earlier versions, which never read
-- them, keep claiming from the ledger during a rolling upgrade (both insert with ON CONFLICT
-- on the plan key, so a plan still runs once).
CREATE TABLE IF NOT EXISTS {schema}.cron_cursors (
    job_name        text        NOT NULL,
    scope_kind      text        NOT NULL,
    scope_id        text        NOT NULL,
    next_plan_time  timestamptz,
    due_at          timestamptz,
    spec            text,
    first_seen_at   timestamptz NOT NULL,
    last_plan_time  timestamptz,
    retired_at      timestamptz,
    updated_at      timestamptz NOT NULL,
    PRIMARY KEY (job_name, scope_kind, scope_id)
);
CREATE INDEX IF NOT EXISTS cron_cursors_due_idx
    ON {schema}.cron_cursors (job_name, due_at)
    WHERE due_at IS NOT NULL;
ALTER TABLE {schema}.schedules ADD COLUMN IF NOT EXISTS last_plan_time timestamptz;
