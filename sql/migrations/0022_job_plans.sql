-- pgsched schema, version 22: what a job's plans are computed from, as its replicas last
-- registered it, so an operator without the job's code can tell whether an instant is one of
-- its scheduled plans (a trigger at that instant adds nothing: the scheduled run covers it),
-- and the job's max_attempts, which its PENDING manual rows carry from their trigger on.
-- `recurrence`: an object with every_us (microseconds) for a cadence, with cron, timezone,
-- dst_repeated and dst_skipped for a cron expression; NULL for a planner hook or a dynamic
-- job (each of whose schedules has its own spec). Only new nullable columns: replicas of earlier versions,
-- which never write them, keep running.
ALTER TABLE {schema}.job_state ADD COLUMN IF NOT EXISTS recurrence jsonb;
ALTER TABLE {schema}.job_state ADD COLUMN IF NOT EXISTS max_attempts integer;
