-- pgsched schema, version 26: an execution whose task failed in a consumer. With
-- pgsched.celery.track, a Celery worker's final failure of the task a beat sent makes the
-- execution FAILED with error_code 'task_failed' (record_task_attempt), which the ledger's
-- check did not allow. The check is replaced by one that also allows it, NOT VALID: every row
-- already there passed the narrower check, so no scan of the ledger is needed (a partition
-- attached later is checked as usual). Replicas of the previous version keep running: they
-- never write the new code. DROP/ADD CONSTRAINT lock the ledger (ACCESS EXCLUSIVE) for a
-- catalog change only; a transactional run holds its lock for its whole run, so this waits a
-- second at most and `migrate` tries again a second later (as migrations 18 and 24).
SET LOCAL lock_timeout = '1s';
ALTER TABLE {schema}.cron_executions DROP CONSTRAINT IF EXISTS cron_executions_error_code_check;
ALTER TABLE {schema}.cron_executions ADD CONSTRAINT cron_executions_error_code_check
    CHECK (error_code IN ('handler_error', 'run_timeout', 'stale_timeout', 'lease_lost',
                          'invalid_result', 'shutdown', 'task_failed')) NOT VALID;
