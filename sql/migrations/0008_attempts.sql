-- pgsched schema, version 8: the history of every attempt.
-- An execution's row shows only its latest attempt. Every attempt that did not end with it
-- (a failure that is retried, a stolen lease, a shutdown) and the final failed one are kept
-- here, written by the statement that ends the attempt and guarded by the same lease token.
-- `fencing_token` names the attempt's lease, so a write replayed after a failover is kept
-- once. Attempts go with their execution (prune). Only adds a table: replicas of the previous
-- version keep running (they just record no attempts), and the migrate lock serialises
-- replicas migrating at once.
CREATE TABLE IF NOT EXISTS {schema}.cron_attempts (
    execution_id   uuid        NOT NULL
                   REFERENCES {schema}.cron_executions (id) ON DELETE CASCADE,
    fencing_token  bigint      NOT NULL,
    attempt        integer     NOT NULL,
    runner_id      text,
    started_at     timestamptz,
    finished_at    timestamptz NOT NULL,
    error_code     text,
    error_msg      text CHECK (char_length(error_msg) <= 4000),
    traceback      text CHECK (octet_length(traceback) <= 16384),
    PRIMARY KEY (execution_id, fencing_token)
);
-- The status page's recent failures: newest first, across jobs.
CREATE INDEX IF NOT EXISTS cron_attempts_finished_idx
    ON {schema}.cron_attempts (finished_at DESC);
