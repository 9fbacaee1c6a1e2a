-- pgsched schema, version 7: a future trigger no longer holds its scope's run-now, and
-- replicas record what their jobs run for.
-- Version 1 allowed one PENDING manual row per (job, scope), so a trigger `at` a future
-- instant swallowed every later run-now of the scope until it ran. The unique index now
-- covers only run-nows: a manual row planned no later than it was created (a run-now is
-- planned at the database's clock as the insert starts, a future `at` after it). A one-off
-- at a future instant is kept unique by the plan key (job, scope, plan_time) alone.
-- Built before the old index goes, in the migration's one transaction (serialised by its
-- advisory lock): at no moment does a run-now lack its uniqueness. The old index guaranteed
-- at most one PENDING manual row per scope, so existing rows cannot violate the new one.
CREATE UNIQUE INDEX IF NOT EXISTS cron_executions_one_pending_run_now_idx
    ON {schema}.cron_executions (job_name, scope_kind, scope_id)
    WHERE status = 'PENDING' AND trigger = 'manual' AND plan_time <= created_at;
DROP INDEX IF EXISTS {schema}.cron_executions_one_pending_manual_idx;
-- What a registered job runs for, so an operator without the APP can check a trigger's
-- scope: 'global' (GLOBAL only), 'static' or 'callable' (scopes listed or computed in code,
-- checked against the scopes its replicas last planned); NULL until a replica of this
-- version registers the job.
ALTER TABLE {schema}.job_state ADD COLUMN IF NOT EXISTS scopes text;
