-- pgsched schema, version 3: RUNNING rows keyed by scope.
-- The overlap check of a claim ("is an earlier plan of this scope RUNNING with a live lease?")
-- runs once per candidate scope. Answered from the (job_name, stale_after) index of version 1,
-- it visited every RUNNING row of the job, so a fan-out of n scopes with r leases running cost
-- n x r row visits per claim (2 s for 10,000 scopes). Keyed by scope it is one index probe.
-- The old index goes: every query it served (the tick's stale probe, running counts, stale
-- close-out) reads the job's RUNNING rows, which this index holds too, and while both existed
-- the planner could still pick the old one for the overlap check.
CREATE INDEX IF NOT EXISTS cron_executions_running_scope_idx
    ON {schema}.cron_executions (job_name, scope_kind, scope_id, plan_time)
    WHERE status = 'RUNNING';
DROP INDEX IF EXISTS {schema}.cron_executions_running_idx;
