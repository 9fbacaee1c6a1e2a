-- pgsched schema, version 9: the live replicas. Each running replica keeps one row here,
-- refreshed by the statement that registers its jobs, and deletes it when it stops cleanly.
-- A row whose replica died is removed by the next registration of any replica once
-- expires_at has passed (the expiry travels with the row, so operators need not know it).
-- Only a new table: replicas of earlier versions, which never read it, keep running.
CREATE TABLE IF NOT EXISTS {schema}.replicas (
    runner_id    text PRIMARY KEY,
    host         text NOT NULL,
    version      text NOT NULL,
    jobs         text[] NOT NULL,
    http_address text,
    started_at   timestamptz NOT NULL,
    seen_at      timestamptz NOT NULL,
    expires_at   timestamptz NOT NULL
);

-- The plans of the next 30 s of each job (at least its next one), as the replica that
-- registered it last computed them: `status` shows the first still ahead as its next plan.
ALTER TABLE {schema}.job_state ADD COLUMN IF NOT EXISTS upcoming timestamptz[];
