-- pgsched schema, version 23: attempts that did not fail. Every attempt kept in cron_attempts
-- so far was a failed one; the consumer of a task an execution sent (pgsched.celery.track in
-- a Celery worker) now records its run of that task there too, and it may succeed. `status`
-- says how such an attempt ended (SUCCESS or FAILED); NULL is a failed attempt, as every
-- attempt written by the engine and before this version. Only adds a nullable column:
-- replicas of the previous version keep running, and the migrate lock serialises replicas
-- migrating at once.
ALTER TABLE {schema}.cron_attempts ADD COLUMN IF NOT EXISTS status text;
