-- pgsched schema, version 14: the ledger is range-partitioned on plan_time.
-- The old table is renamed `cron_executions_legacy` and, when it holds rows, attached as the
-- partition of every plan before `legacy_until` (its validated CHECK constraint, migrations
-- 12 and 13, spares ATTACH a scan; its indexes match the new parent's, so none is built):
-- nothing is copied, the lock is held only for catalog changes. A fresh install's empty
-- table is dropped instead. Statements of replicas of version 11 name `cron_executions`, so
-- from the commit on they write to the partitioned table (a rolling upgrade keeps running).
-- Partitions of `width` (cron_partitioning) are created ahead by `migrate` and by each
-- replica (cron_partitions_ahead), and for the plans a backfill or trigger is about to
-- write (cron_ensure_partitions); a row for a span with no partition of its own lands in
-- the DEFAULT partition, so no insert fails for want of one.
--
-- Unique indexes of a partitioned table must contain plan_time, so two invariants that were
-- partial unique indexes move out of the ledger: one exclusive RUNNING row per scope
-- (overlap="forbid") is kept by the claims, which take a transaction-scoped advisory lock
-- per scope and check for a RUNNING row in a statement that starts after it; one PENDING
-- run-now per scope is kept the same way by `trigger`. Execution ids have an index in every
-- partition (unique there); ids are UUIDv7, so they stay unique across partitions.
--
-- The indexes kept, each for what reads it (a finished row is in the first four only):
--   plan key (unique)     ON CONFLICT of claims, backfills and triggers; a scope's runs
--                         (dashboard cells and schedule runs, trigger's lookup, first sight)
--   id (per partition)    every lookup by id: heartbeats, terminal writes, cancel, runs
--                         show, the API, attempts
--   job_plan              a job's plans newest first: status, the dashboard's plan columns
--   created               `pgsched runs` and the API's run list, newest first
--   running_scope         RUNNING rows: tick probe, stale close-out and steal, overlap check
--   pending, retry        the tick probe and claims of PENDING and due FAILED rows
--   failed_job            a job's failures (job page, failed count in status)
-- Dropped: the global id primary key, finished_at (retention drops partitions; the legacy
-- and DEFAULT partitions keep one of their own for batched deletes), success (the last
-- success is read from job_plan), failed_final (failed_job holds its rows), and the two
-- partial unique indexes above.

-- Attempts name their execution's plan, so they go with its partition (migration 13
-- dropped their FK).
ALTER TABLE {schema}.cron_attempts ADD COLUMN IF NOT EXISTS plan_time timestamptz;
UPDATE {schema}.cron_attempts a SET plan_time = e.plan_time
FROM {schema}.cron_executions e WHERE e.id = a.execution_id AND a.plan_time IS NULL;
CREATE INDEX IF NOT EXISTS cron_attempts_plan_idx ON {schema}.cron_attempts (plan_time);

ALTER TABLE {schema}.cron_executions RENAME TO cron_executions_legacy;
ALTER TABLE {schema}.cron_executions_legacy RENAME CONSTRAINT cron_executions_pkey
    TO cron_executions_legacy_pkey;
ALTER TABLE {schema}.cron_executions_legacy RENAME CONSTRAINT cron_executions_plan_key
    TO cron_executions_legacy_plan_key;
ALTER INDEX {schema}.cron_executions_running_scope_idx RENAME TO cron_executions_legacy_running_idx;
ALTER INDEX {schema}.cron_executions_pending_idx RENAME TO cron_executions_legacy_pending_idx;
ALTER INDEX {schema}.cron_executions_retry_idx RENAME TO cron_executions_legacy_retry_idx;
ALTER INDEX {schema}.cron_executions_job_plan_idx RENAME TO cron_executions_legacy_job_plan_idx;
ALTER INDEX {schema}.cron_executions_created_idx RENAME TO cron_executions_legacy_created_idx;
ALTER INDEX {schema}.cron_executions_failed_job_idx RENAME TO cron_executions_legacy_failed_idx;
ALTER INDEX {schema}.cron_executions_finished_idx RENAME TO cron_executions_legacy_finished_idx;
DROP INDEX {schema}.cron_executions_success_idx;
DROP INDEX {schema}.cron_executions_failed_final_idx;
DROP INDEX {schema}.cron_executions_one_exclusive_idx;
DROP INDEX {schema}.cron_executions_one_pending_run_now_idx;

-- The old table's columns, in its order (so rows route without conversion), and its CHECK
-- constraints under their names (ATTACH matches them by name).
CREATE TABLE {schema}.cron_executions (
    id             uuid NOT NULL DEFAULT {schema}.uuid_v7(),
    job_name       text NOT NULL,
    scope_kind     text NOT NULL DEFAULT 'global',
    scope_id       text NOT NULL DEFAULT 'global',
    plan_time      timestamptz NOT NULL,
    trigger        text NOT NULL,
    status         text NOT NULL,
    attempt        integer NOT NULL DEFAULT 1,
    max_attempts   integer NOT NULL DEFAULT 1,
    next_retry_at  timestamptz,
    runner_id      text,
    lease_token    uuid NOT NULL DEFAULT gen_random_uuid(),
    fencing_token  bigint NOT NULL DEFAULT {schema}.next_fencing_token(),
    heartbeat_at   timestamptz,
    stale_after    timestamptz,
    started_at     timestamptz,
    finished_at    timestamptz,
    duration_ms    integer,
    rows_affected  bigint,
    result         jsonb NOT NULL DEFAULT '{{}}',
    error_code     text,
    error_msg      text,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    exclusive      boolean NOT NULL DEFAULT false,
    payload        jsonb,
    CONSTRAINT cron_executions_trigger_check CHECK (trigger IN ('schedule', 'manual', 'backfill')),
    CONSTRAINT cron_executions_status_check
        CHECK (status IN ('PENDING', 'RUNNING', 'SUCCESS', 'FAILED', 'CANCELLED')),
    CONSTRAINT cron_executions_error_code_check
        CHECK (error_code IN ('handler_error', 'run_timeout', 'stale_timeout', 'lease_lost',
                              'invalid_result', 'shutdown')),
    CONSTRAINT cron_executions_error_msg_check CHECK (char_length(error_msg) <= 4000),
    CONSTRAINT cron_executions_attempt_check CHECK (attempt >= 1 AND attempt <= max_attempts),
    CONSTRAINT cron_executions_plan_key UNIQUE (job_name, scope_kind, scope_id, plan_time)
) PARTITION BY RANGE (plan_time);

CREATE INDEX cron_executions_running_scope_idx
    ON {schema}.cron_executions (job_name, scope_kind, scope_id, plan_time)
    WHERE status = 'RUNNING';
CREATE INDEX cron_executions_pending_idx
    ON {schema}.cron_executions (job_name, plan_time) WHERE status = 'PENDING';
CREATE INDEX cron_executions_retry_idx
    ON {schema}.cron_executions (job_name, next_retry_at)
    WHERE status = 'FAILED' AND next_retry_at IS NOT NULL;
CREATE INDEX cron_executions_job_plan_idx
    ON {schema}.cron_executions (job_name, plan_time DESC);
CREATE INDEX cron_executions_created_idx
    ON {schema}.cron_executions (created_at DESC);
CREATE INDEX cron_executions_failed_job_idx
    ON {schema}.cron_executions (job_name, finished_at DESC) WHERE status = 'FAILED';

-- The legacy rows stay where they are; an empty table (a fresh install) just goes.
DO $$
DECLARE
    s text := (SELECT relnamespace::regnamespace::text FROM pg_class
               WHERE oid = (SELECT tableoid FROM {schema}.cron_partitioning LIMIT 1));
    b timestamptz := (SELECT legacy_until FROM {schema}.cron_partitioning);
BEGIN
    IF EXISTS (SELECT 1 FROM {schema}.cron_executions_legacy) THEN
        EXECUTE format('ALTER TABLE %s.cron_executions ATTACH PARTITION %s.cron_executions_legacy'
                       ' FOR VALUES FROM (MINVALUE) TO (%L)', s, s, b);
        INSERT INTO {schema}.cron_partitions (name, lo, hi)
        VALUES ('cron_executions_legacy', '-infinity', b);
    ELSE
        DROP TABLE {schema}.cron_executions_legacy;
    END IF;
END
$$;

-- Rows of spans with no partition of their own. Its finished_at index serves retention's
-- batched deletes (as the legacy partition's does); it is kept small.
CREATE TABLE {schema}.cron_executions_default PARTITION OF {schema}.cron_executions DEFAULT;
CREATE UNIQUE INDEX cron_executions_default_id_idx ON {schema}.cron_executions_default (id);
CREATE INDEX cron_executions_default_finished_idx
    ON {schema}.cron_executions_default (finished_at) WHERE finished_at IS NOT NULL;

-- Partitions for the spans of the given plan times that have none (at most `most` created
-- per call; past that, rows go to the DEFAULT partition). Each is created empty (with its
-- id index; no fillfactor below 100: the terminal update cannot be HOT while the partial
-- indexes of unfinished rows name `status`, so free space would only cost bytes) and then
-- attached, which takes only a SHARE UPDATE EXCLUSIVE lock on the parent; the DEFAULT
-- partition is locked a moment and scanned. When it holds rows of the span already, the
-- span keeps going there (attaching would fail) and the rows stay where they are. One
-- creator at a time (an advisory lock, taken only when some span lacks a partition); a lock
-- not had within a second skips the span.
CREATE OR REPLACE FUNCTION {schema}.cron_ensure_partitions(wanted timestamptz[],
                                                           most integer DEFAULT 32)
RETURNS integer
-- As the schema's owner: replicas and operators (sql/roles.sql's runtime role, which has no
-- DDL right) create partitions through it.
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s text := (SELECT relnamespace::regnamespace::text FROM pg_class
               WHERE oid = (SELECT tableoid FROM {schema}.cron_partitioning LIMIT 1));
    w interval := (SELECT width FROM {schema}.cron_partitioning);
    x timestamptz;
    lo timestamptz;
    hi timestamptz;
    part text;
    made integer := 0;
    missing timestamptz[];
BEGIN
    -- One plan time per span of `width` that no partition holds (a backfill's many plans
    -- cost one probe each here, and nothing more once their partitions exist).
    missing := ARRAY(
        SELECT min(u) FROM unnest(wanted) AS u
        WHERE u IS NOT NULL AND isfinite(u)
          AND NOT EXISTS (SELECT 1 FROM {schema}.cron_partitions p WHERE p.lo <= u AND u < p.hi)
        GROUP BY date_bin(w, u, timestamptz '2000-01-01 00:00+00') ORDER BY 1);
    IF cardinality(missing) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('pgsched.partitions:' || s, 0));
    PERFORM set_config('lock_timeout', '1s', true);
    FOREACH x IN ARRAY missing LOOP
        EXIT WHEN made >= most;
        CONTINUE WHEN EXISTS (SELECT 1 FROM {schema}.cron_partitions p
                              WHERE p.lo <= x AND x < p.hi);
        -- The span of x, cut short by partitions made with another width.
        lo := greatest(date_bin(w, x, timestamptz '2000-01-01 00:00+00'),
                       (SELECT max(p.hi) FROM {schema}.cron_partitions p WHERE p.hi <= x));
        hi := least(date_bin(w, x, timestamptz '2000-01-01 00:00+00') + w,
                    (SELECT min(p.lo) FROM {schema}.cron_partitions p WHERE p.lo > x));
        part := 'cron_executions_' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"T"HH24MISS');
        BEGIN
            EXECUTE format('CREATE TABLE %s.%I (LIKE %s.cron_executions INCLUDING DEFAULTS'
                           ' INCLUDING CONSTRAINTS)', s, part, s);
            EXECUTE format('CREATE UNIQUE INDEX %I ON %s.%I (id)', part || '_id_idx', s, part);
            EXECUTE format('ALTER TABLE %s.cron_executions ATTACH PARTITION %s.%I'
                           ' FOR VALUES FROM (%L) TO (%L)', s, s, part, lo, hi);
            INSERT INTO {schema}.cron_partitions (name, lo, hi) VALUES (part, lo, hi);
            made := made + 1;
        EXCEPTION WHEN check_violation OR lock_not_available THEN
            NULL;  -- rolled back to the block's start: the span stays with the DEFAULT partition
        END;
    END LOOP;
    RETURN made;
END
$$;

-- The partitions from the span before now's to `ahead` past now.
CREATE OR REPLACE FUNCTION {schema}.cron_partitions_ahead() RETURNS integer
LANGUAGE sql AS $$
    SELECT {schema}.cron_ensure_partitions(ARRAY(
        SELECT generate_series(clock_timestamp() - p.width, clock_timestamp() + p.ahead, p.width)
        FROM {schema}.cron_partitioning p))
$$;

SELECT {schema}.cron_partitions_ahead();

-- The rows migration 13 set aside (planned past legacy_until) go in as they were.
SELECT {schema}.cron_ensure_partitions(ARRAY(SELECT plan_time FROM {schema}.cron_executions_ahead));
INSERT INTO {schema}.cron_executions SELECT * FROM {schema}.cron_executions_ahead
ON CONFLICT DO NOTHING;
DROP TABLE {schema}.cron_executions_ahead;

-- Retention: drops one partition when none of its rows is unfinished (RUNNING, PENDING, or
-- FAILED with a retry left: each read from its partial index), with the attempts of its
-- span. A partition that still holds one is kept whole, and looked at again by the next
-- retention run. Dropping locks the parent table (ACCESS EXCLUSIVE, as any DROP of a
-- partition does) for the moment it takes; a lock not had within a second keeps the
-- partition for the next run rather than queueing every claim behind it. Returns the rows
-- dropped (the statistics' count, counted only for a partition never analyzed), or -1 when
-- the partition is kept.
CREATE OR REPLACE FUNCTION {schema}.cron_drop_partition(part text) RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    s text := (SELECT relnamespace::regnamespace::text FROM pg_class
               WHERE oid = (SELECT tableoid FROM {schema}.cron_partitioning LIMIT 1));
    span record;
    busy boolean;
    n bigint;
BEGIN
    SELECT p.lo, p.hi INTO span FROM {schema}.cron_partitions p WHERE p.name = part FOR UPDATE;
    IF NOT FOUND THEN
        RETURN -1;
    END IF;
    EXECUTE format('SELECT reltuples::bigint FROM pg_class WHERE oid = %L::regclass',
                   s || '.' || quote_ident(part)) INTO n;
    IF n < 0 THEN
        EXECUTE format('SELECT count(*) FROM %s.%I', s, part) INTO n;
    END IF;
    PERFORM set_config('lock_timeout', '1s', true);
    EXECUTE format('LOCK TABLE ONLY %s.cron_executions IN ACCESS EXCLUSIVE MODE', s);
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %1$s.%2$I WHERE status = ''RUNNING'')'
                   ' OR EXISTS (SELECT 1 FROM %1$s.%2$I WHERE status = ''PENDING'')'
                   ' OR EXISTS (SELECT 1 FROM %1$s.%2$I'
                   '            WHERE status = ''FAILED'' AND next_retry_at IS NOT NULL)',
                   s, part) INTO busy;
    IF busy THEN
        RETURN -1;
    END IF;
    DELETE FROM {schema}.cron_attempts a WHERE a.plan_time >= span.lo AND a.plan_time < span.hi;
    EXECUTE format('DROP TABLE %s.%I', s, part);
    DELETE FROM {schema}.cron_partitions p WHERE p.name = part;
    RETURN n;
EXCEPTION WHEN lock_not_available THEN
    RETURN -1;
END
$$;
