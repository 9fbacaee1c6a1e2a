-- Every statement pgsched runs, loaded by name ("-- name: x"). {schema} is the quoted schema;
-- braces that belong to SQL are doubled. All times come from clock_timestamp(), taken once
-- per statement in the "now" CTE so it is usable as an index bound.
--
-- running_before: a RUNNING (or FAILED, or due PENDING) row's plan time is never later than
-- the database's clock when it became so: a plan is claimed once due, a PENDING row once its
-- plan time has come. Statements that look for such rows get a bound past the clock (the
-- tick's clock plus an hour, NULL for none) so the planner leaves out the ledger's partitions
-- of later plans, made days ahead. A claim run past its bound claims nothing (a RUNNING row
-- could hide in a partition left out): the next tick brings a new bound.
--
-- job_name = (SELECT %(job)s::text): in the checks made once per scope (a RUNNING row of the
-- scope, a plan's row, the scope's latest plan, first sight's cursor updates), the job's name
-- is kept from the planner's estimates. Figures taken before the job had rows in a partition
-- (a new job, or a partition autovacuum analyzed while it held other jobs' rows) estimate one
-- row for it, and the index of (job, plan time) then looks as cheap as the one by scope:
-- each check read every row of the job in the partition (a 100,000-scope job's claims grew
-- slower until one met the statement timeout). A name it does not
-- know is estimated at the partition's rows per job, and the index by scope wins. The same
-- with the cursors: on figures from before a job's 100,000 cursors, first sight's updates
-- joined each of them (taken for one) with every listed scope, and a sight of an unchanged
-- list met the statement timeout.

-- name: tick_probe :one
-- One statement per tick: the database clock, pause flags, and which jobs have stale
-- leases, due retries or due PENDING rows (each read from a partial index), when each
-- job's earliest cursor (or stored schedule) falls due, and the live replicas. Its running_before is the previous
-- tick's (a tick an hour late may miss a row: the next finds it).
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
SELECT (SELECT t FROM now) AS now,
       ARRAY(SELECT job_name FROM {schema}.job_state
             WHERE paused AND job_name = ANY(%(jobs)s)) AS paused,
       ARRAY(SELECT DISTINCT job_name FROM {schema}.cron_executions
             WHERE status = 'RUNNING' AND job_name = ANY(%(jobs)s)
               AND plan_time < coalesce(%(running_before)s::timestamptz, 'infinity')
               AND stale_after < (SELECT t FROM now)) AS stale_jobs,
       ARRAY(SELECT DISTINCT job_name FROM {schema}.cron_executions
             WHERE status = 'FAILED' AND next_retry_at IS NOT NULL AND job_name = ANY(%(jobs)s)
               AND plan_time < coalesce(%(running_before)s::timestamptz, 'infinity')
               AND next_retry_at <= (SELECT t FROM now)) AS retry,
       ARRAY(SELECT DISTINCT job_name FROM {schema}.cron_executions
             WHERE status = 'PENDING' AND job_name = ANY(%(jobs)s)
               AND plan_time <= (SELECT t FROM now)
               AND plan_time < coalesce(%(running_before)s::timestamptz, 'infinity')) AS pending,
       -- per dynamic job, in the order given: its earliest next plan (one index probe each)
       ARRAY(SELECT (SELECT min(s.next_plan_time) FROM {schema}.schedules s
                     WHERE s.job_name = d.job AND NOT s.paused
                       AND s.next_plan_time IS NOT NULL)
             FROM unnest(%(dynamic)s::text[]) WITH ORDINALITY AS d(job, n)
             ORDER BY d.n) AS dynamic_next,
       -- per code-defined job, in the order given: its earliest due cursor (one index probe)
       ARRAY(SELECT (SELECT min(c.due_at) FROM {schema}.cron_cursors c
                     WHERE c.job_name = d.job AND c.due_at IS NOT NULL)
             FROM unnest(%(static)s::text[]) WITH ORDINALITY AS d(job, n)
             ORDER BY d.n) AS static_next,
       -- the live replicas by runner id: each starts its claims at a place of its rank's
       ARRAY(SELECT runner_id FROM {schema}.live_replicas ORDER BY runner_id) AS replicas

-- name: generic_plans :exec
-- Before tick_probe, in its transaction: plan it once per connection. Its custom plans were
-- made again at every tick, and planning its reads of each of the ledger's partitions cost
-- more than running them, more with every partition of history; the one generic plan leaves
-- the partitions of later plans out as it starts (running_before).
SELECT set_config('plan_cache_mode', 'force_generic_plan', true)

-- name: claim_begin :exec
-- The first statement of every claim transaction. A replica cut off inside one (its session
-- idle in transaction, holding the rows it inserted) is ended by the server after idle_ms;
-- meanwhile the others' claims of the same keys wait at most lock_ms, then give up the tick.
-- A claim reads pages it has just read or locked (the due cursors it moves, the scopes'
-- recent rows): a random read costs about a sequential one, and at the default 4 the planner
-- moved a batch of a 100,000-scope job's cursors by hashing all 100,000 of them.
SELECT set_config('idle_in_transaction_session_timeout', %(idle_ms)s, true),
       set_config('lock_timeout', %(lock_ms)s, true),
       set_config('random_page_cost',
                  least(current_setting('random_page_cost')::float8, 1.1)::text, true)

-- name: claim_begin_synchronous :exec
-- claim_begin with synchronous_claims: the claim also commits only once a synchronous standby
-- has flushed it, so a failover to that standby cannot undo it. 'on' rather than
-- 'remote_apply': a promoted standby replays all the WAL it flushed before it takes writes,
-- and pgsched never reads from a standby, so waiting for the replay too would only add latency.
SELECT set_config('idle_in_transaction_session_timeout', %(idle_ms)s, true),
       set_config('lock_timeout', %(lock_ms)s, true),
       set_config('random_page_cost',
                  least(current_setting('random_page_cost')::float8, 1.1)::text, true),
       set_config('synchronous_commit', 'on', true)

-- name: synchronous_commit :exec
-- The current transaction (a terminal write with synchronous_claims) commits only once a
-- synchronous standby has flushed it ('on': see claim_begin_synchronous).
SELECT set_config('synchronous_commit', 'on', true)

-- name: commit_phase :exec
-- A transactional run's handler has returned; its terminal write and COMMIT follow at once.
-- From here the transaction may sit idle for the job's stale_timeout at most, not for
-- run_timeout + a margin as while the handler ran: a replica cut off between its terminal
-- write and its COMMIT holds the lease row locked, and the others' steals skip locked rows,
-- so the server must end that session by the time the lease goes stale. With
-- synchronous_claims the COMMIT also waits for a synchronous standby (see claim_begin_synchronous).
SELECT set_config('idle_in_transaction_session_timeout', %(idle_ms)s, true),
       set_config('synchronous_commit',
                  CASE WHEN %(synchronous)s THEN 'on'
                       ELSE current_setting('synchronous_commit') END, true)

-- name: synchronous_standbys :one
-- Whether the server has synchronous standbys: configured, and connected as sync or quorum
-- (sync_state is NULL for the walsenders a role without pg_read_all_stats may not inspect).
SELECT current_setting('synchronous_standby_names') AS names,
       (SELECT count(*) FROM pg_stat_replication
        WHERE sync_state IN ('sync', 'quorum')) AS synchronous,
       (SELECT count(*) FROM pg_stat_replication WHERE sync_state IS NULL) AS hidden

-- name: try_lock_job :one
-- Only for jobs with max_running: serialises their claims across replicas so the cap holds
-- cluster-wide. A replica that does not get it at once skips the job for this tick.
SELECT pg_try_advisory_xact_lock(hashtextextended(%(key)s, 0)) AS locked

-- name: running_count :one
SELECT count(*) AS running FROM {schema}.cron_executions
WHERE job_name = %(job)s AND status = 'RUNNING' AND stale_after >= clock_timestamp()

-- name: close_stale :many
-- Stale leases that must not be re-entered (or have no attempt left) become FAILED; the
-- attempt is kept in cron_attempts. A steal may take a row one attempt past max_attempts
-- (max_attempts=1 survives one crash), so a lease is past stealing once its attempt exceeds
-- max_attempts: its holders died max_attempts + 1 times in a row (a poison plan).
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
closed AS (
    UPDATE {schema}.cron_executions e
    SET status = 'FAILED', error_code = 'stale_timeout',
        error_msg = left('lease of runner ' || coalesce(e.runner_id, '?')
                         || ' went stale: no heartbeat since '
                         || coalesce(e.heartbeat_at::text, '?'), 4000),
        next_retry_at = NULL, finished_at = now.t, updated_at = now.t,
        duration_ms = LEAST(extract(epoch FROM now.t - e.started_at) * 1000, 2147483647)::integer
    FROM now
    WHERE e.job_name = %(job)s AND e.status = 'RUNNING' AND e.stale_after < now.t
      AND (NOT %(reentry)s OR e.attempt > e.max_attempts)
    RETURNING e.id, e.scope_kind, e.scope_id, e.plan_time, e.attempt, e.runner_id,
              e.fencing_token, e.started_at, e.finished_at, e.error_code, e.error_msg,
              e.max_attempts, e.trigger, e.lease_token, e.payload
),
kept AS (
    INSERT INTO {schema}.cron_attempts
        (execution_id, fencing_token, attempt, runner_id, started_at, finished_at, error_code,
         error_msg, plan_time)
    SELECT c.id, c.fencing_token, c.attempt, c.runner_id, c.started_at, c.finished_at,
           c.error_code, c.error_msg, c.plan_time
    FROM closed c
    ON CONFLICT DO NOTHING
)
SELECT id, scope_kind, scope_id, plan_time, attempt, runner_id, max_attempts, trigger,
       lease_token, fencing_token, error_msg, payload
FROM closed

-- name: lock_existing_scopes :many
-- overlap="forbid", before claim_existing: the scopes of the rows it may take, each under
-- its scope lock (one claim_existing at a time per scope) and with its cursor row (or, for a
-- dynamic job, its stored schedule) locked: the claim of a scope's next plan holds that row,
-- so the two never check the scope's RUNNING rows at once. A scope whose lock or row another
-- claim holds is skipped for this tick. claim_existing takes rows of these scopes only, in a
-- statement that starts after the locks are held (it sees every claim that held them before).
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
scoped AS MATERIALIZED (
    SELECT DISTINCT c.scope_kind, c.scope_id
    FROM (
        SELECT c.scope_kind, c.scope_id FROM {schema}.cron_executions c
        WHERE c.job_name = %(job)s
          AND (   (%(reentry)s AND c.status = 'RUNNING' AND c.stale_after < (SELECT t FROM now)
                   AND c.attempt <= c.max_attempts)
               OR (c.status = 'FAILED' AND c.next_retry_at <= (SELECT t FROM now)
                   AND c.attempt < c.max_attempts + CASE WHEN c.stolen THEN 1 ELSE 0 END)
               OR (c.status = 'PENDING' AND c.plan_time <= (SELECT t FROM now)))
        ORDER BY c.plan_time, c.scope_kind, c.scope_id
        LIMIT %(limit)s
    ) AS c
    WHERE pg_try_advisory_xact_lock(hashtextextended(
              %(lock_ns)s || %(job)s || chr(31) || c.scope_kind || chr(31) || c.scope_id, 0))
),
-- the scopes' cursor rows or stored schedules, as they are (a scope may have neither: a
-- trigger of a scope the job does not list)
keyed AS MATERIALIZED (
    SELECT c.scope_kind, c.scope_id FROM {schema}.cron_cursors c
    WHERE NOT %(dynamic)s AND c.job_name = %(job)s
      AND (c.scope_kind, c.scope_id) IN (SELECT scope_kind, scope_id FROM scoped)
    UNION ALL
    SELECT s.scope_kind, s.scope_id FROM {schema}.schedules s
    WHERE %(dynamic)s AND s.job_name = %(job)s
      AND (s.scope_kind, s.scope_id) IN (SELECT scope_kind, scope_id FROM scoped)
),
cursors_held AS MATERIALIZED (
    SELECT c.scope_kind, c.scope_id FROM {schema}.cron_cursors c
    WHERE NOT %(dynamic)s AND c.job_name = %(job)s
      AND (c.scope_kind, c.scope_id) IN (SELECT scope_kind, scope_id FROM scoped)
    FOR UPDATE OF c SKIP LOCKED
),
schedules_held AS MATERIALIZED (
    SELECT s.scope_kind, s.scope_id FROM {schema}.schedules s
    WHERE %(dynamic)s AND s.job_name = %(job)s
      AND (s.scope_kind, s.scope_id) IN (SELECT scope_kind, scope_id FROM scoped)
    FOR UPDATE OF s SKIP LOCKED
),
held AS MATERIALIZED (
    SELECT * FROM cursors_held UNION ALL SELECT * FROM schedules_held
)
SELECT c.scope_kind, c.scope_id FROM scoped c
WHERE NOT EXISTS (SELECT 1 FROM keyed k
                  WHERE k.scope_kind = c.scope_kind AND k.scope_id = c.scope_id)
   OR EXISTS (SELECT 1 FROM held h WHERE h.scope_kind = c.scope_kind AND h.scope_id = c.scope_id)

-- name: claim_existing :many
-- Takes over existing rows on the same row, oldest plan first: stale leases (steal, up to
-- attempt max_attempts + 1: see close_stale; the row is marked stolen), FAILED rows whose
-- retry is due (a handler's failure is retried while attempt < max_attempts, + 1 on a row
-- once stolen: the steal's attempt is the crash's, not a retry's), and PENDING rows (triggers
-- and backfills). Under overlap="forbid" a scope runs one execution at a time: a row is
-- taken only when its scope is one lock_existing_scopes locked and no other row of it is
-- RUNNING (an exclusive one, or any with a live lease), at most one per scope per
-- statement, and it becomes the scope's `exclusive` row.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
locked AS (
    SELECT c.id, c.status AS previous_status, c.runner_id AS previous_runner,
           c.scope_kind, c.scope_id, c.plan_time, c.attempt AS previous_attempt,
           c.fencing_token AS previous_fencing, c.started_at AS previous_started,
           c.heartbeat_at AS previous_heartbeat
    FROM {schema}.cron_executions c
    WHERE c.job_name = %(job)s
      AND (   (%(reentry)s AND c.status = 'RUNNING' AND c.stale_after < (SELECT t FROM now)
               AND c.attempt <= c.max_attempts)
           OR (c.status = 'FAILED' AND c.next_retry_at <= (SELECT t FROM now)
               AND c.attempt < c.max_attempts + CASE WHEN c.stolen THEN 1 ELSE 0 END)
           OR (c.status = 'PENDING' AND c.plan_time <= (SELECT t FROM now)))
      AND (NOT %(forbid)s OR (
            (c.scope_kind, c.scope_id) IN (
                SELECT * FROM unnest(%(locked_kinds)s::text[], %(locked_ids)s::text[]))
            AND (SELECT t FROM now) < coalesce(%(running_before)s::timestamptz, 'infinity')
            AND NOT EXISTS (
                SELECT 1 FROM {schema}.cron_executions r
                WHERE r.job_name = (SELECT %(job)s::text) AND r.scope_kind = c.scope_kind
                  AND r.scope_id = c.scope_id AND r.status = 'RUNNING' AND r.id <> c.id
                  AND r.plan_time < coalesce(%(running_before)s::timestamptz, 'infinity')
                  AND (r.exclusive OR r.stale_after >= (SELECT t FROM now)))))
    ORDER BY c.plan_time, c.scope_kind, c.scope_id
    LIMIT %(limit)s
    FOR UPDATE OF c SKIP LOCKED
),
picked AS (
    SELECT l.* FROM (
        SELECT l.*, row_number() OVER (
                   PARTITION BY l.scope_kind, l.scope_id ORDER BY l.plan_time, l.id) AS nth
        FROM locked l) AS l
    WHERE NOT %(forbid)s OR l.nth = 1
),
taken AS (
    UPDATE {schema}.cron_executions e
    SET status = 'RUNNING',
        attempt = e.attempt + CASE WHEN e.status = 'PENDING' THEN 0 ELSE 1 END,
        max_attempts = CASE WHEN e.status = 'PENDING' THEN %(max_attempts)s ELSE e.max_attempts END,
        stolen = e.stolen OR e.status = 'RUNNING',
        exclusive = %(forbid)s,
        lease_token = gen_random_uuid(),
        fencing_token = {schema}.next_fencing_token(),
        runner_id = %(runner)s,
        heartbeat_at = now.t, stale_after = now.t + %(stale_timeout)s, started_at = now.t,
        finished_at = NULL, duration_ms = NULL, next_retry_at = NULL, error_code = NULL,
        error_msg = NULL, rows_affected = NULL, result = '{{}}', updated_at = now.t
    FROM picked, now
    WHERE e.id = picked.id
    RETURNING e.id, e.scope_kind, e.scope_id, e.plan_time, e.trigger, e.attempt, e.max_attempts,
              e.lease_token, e.fencing_token, e.started_at, e.payload, e.stolen,
              picked.previous_status, picked.previous_runner
),
-- A stolen lease's attempt ends here: kept in cron_attempts with the runner that lost it.
kept AS (
    INSERT INTO {schema}.cron_attempts
        (execution_id, fencing_token, attempt, runner_id, started_at, finished_at, error_code,
         error_msg, plan_time)
    SELECT p.id, p.previous_fencing, p.previous_attempt, p.previous_runner, p.previous_started,
           (SELECT t FROM now), 'stale_timeout',
           left('lease of runner ' || coalesce(p.previous_runner, '?')
                || ' went stale: no heartbeat since '
                || coalesce(p.previous_heartbeat::text, '?') || '; taken over', 4000),
           p.plan_time
    FROM picked p
    WHERE p.previous_status = 'RUNNING' AND p.id IN (SELECT id FROM taken)
    ON CONFLICT DO NOTHING
)
SELECT * FROM taken

-- name: sight_cursors :one
-- A code-defined job's scopes as one replica sees them, written only when its list (or the
-- job's schedule) changed. A scope new to the job gets its cursor (first sight): due at the
-- caller's first plan, plus the scope's jitter. A scope with no cursor but scheduled plans in
-- the ledger (written by an earlier version, or restored by hand) resumes after its latest
-- one instead: due now with no spec, so the next claim computes its next plan under the
-- job's catch-up (this first-sight lookup is the only read of the ledger's history). A
-- retired cursor whose scope came back starts again as on first sight. Cursors of scopes no
-- longer listed are retired (kept, so their scope is not mistaken for one from an earlier
-- version), but only while every other live replica that runs the job lists the same scopes
-- (the same digest; `agreed`): in a rolling update that changes the list, nothing is retired
-- until the replicas agree, and the caller writes its list again then. It runs after
-- lock_sight, in the same transaction: two replicas writing opposite changes at once would
-- otherwise each read the other's previous digest and each retire a scope the other lists.
-- Cursors computed from another schedule are computed again by their next claim.
WITH now AS MATERIALIZED (SELECT %(seen_at)s::timestamptz AS t),
mine AS (
    UPDATE {schema}.replicas r
    SET scope_digests = r.scope_digests || jsonb_build_object(%(job)s::text, %(digest)s::text)
    WHERE r.runner_id = %(runner)s
    RETURNING 1
),
agreed AS MATERIALIZED (
    SELECT NOT EXISTS (
        SELECT 1 FROM {schema}.replicas r, now
        WHERE r.runner_id <> %(runner)s AND r.expires_at >= now.t AND %(job)s = ANY (r.jobs)
          AND (r.scope_digests ->> %(job)s) IS DISTINCT FROM %(digest)s
    ) AS ok
),
given AS MATERIALIZED (
    SELECT g.kind, g.id, g.due_at
    FROM unnest(%(kinds)b::text[], %(ids)b::text[], %(dues)b::timestamptz[])
         AS g(kind, id, due_at)
),
-- Every given scope beside the job's cursor for it, and every cursor beside its given scope,
-- in one FULL JOIN: a full join is only ever a hash or merge join, where an anti-join of the
-- cursors against the given scopes (or the reverse) was planned as a nested loop over the
-- scopes on a cursors table not yet analyzed (a new job, a first deploy): quadratic, every
-- replica's tick timing out at 10,000 scopes until autovacuum analyzed it.
pairs AS MATERIALIZED (
    SELECT g.kind, g.id, g.due_at, c.scope_kind, c.scope_id, c.retired_at, c.spec
    FROM given g
    FULL JOIN (SELECT x.scope_kind, x.scope_id, x.retired_at, x.spec
               FROM {schema}.cron_cursors x WHERE x.job_name = %(job)s) AS c
      ON c.scope_kind = g.kind AND c.scope_id = g.id
),
retired AS (
    UPDATE {schema}.cron_cursors c
    SET retired_at = now.t, next_plan_time = NULL, due_at = NULL, updated_at = now.t
    FROM pairs p, now
    WHERE p.id IS NULL AND p.retired_at IS NULL AND (SELECT ok FROM agreed)
      AND c.job_name = (SELECT %(job)s::text)
      AND c.scope_kind = p.scope_kind AND c.scope_id = p.scope_id
    RETURNING 1
),
respecified AS (
    UPDATE {schema}.cron_cursors c
    SET spec = NULL, due_at = now.t, updated_at = now.t
    FROM pairs p, now
    WHERE p.id IS NOT NULL AND p.scope_id IS NOT NULL AND p.retired_at IS NULL
      AND p.spec IS DISTINCT FROM %(spec)s AND p.spec IS NOT NULL
      AND c.job_name = (SELECT %(job)s::text) AND c.scope_kind = p.kind AND c.scope_id = p.id
      AND c.retired_at IS NULL AND c.spec IS DISTINCT FROM %(spec)s AND c.spec IS NOT NULL
    RETURNING 1
),
-- New cursors: DO NOTHING, not DO UPDATE, on a key another replica inserted meanwhile: DO
-- UPDATE locks every conflicting row even when its WHERE is false, which waits for any claim
-- transaction holding that cursor.
inserted AS (
    INSERT INTO {schema}.cron_cursors AS c
        (job_name, scope_kind, scope_id, next_plan_time, due_at, spec, first_seen_at,
         last_plan_time, updated_at)
    SELECT %(job)s, p.kind, p.id,
           CASE WHEN l.latest IS NULL THEN %(first)s::timestamptz END,
           CASE WHEN l.latest IS NULL THEN p.due_at ELSE now.t END,
           CASE WHEN l.latest IS NULL THEN %(spec)s END,
           now.t, l.latest, now.t
    FROM pairs p
    CROSS JOIN now
    LEFT JOIN LATERAL (  -- never had a cursor: the upgrade path
        SELECT max(e.plan_time) AS latest FROM {schema}.cron_executions e
        WHERE e.job_name = (SELECT %(job)s::text) AND e.scope_kind = p.kind AND e.scope_id = p.id
          AND e.trigger = 'schedule'
    ) AS l ON true
    WHERE p.id IS NOT NULL AND p.scope_id IS NULL
    ORDER BY p.kind, p.id
    ON CONFLICT (job_name, scope_kind, scope_id) DO NOTHING
    RETURNING 1
),
-- Retired cursors whose scope came back start again as on first sight (a retired cursor is
-- never due, so no claim holds it).
revived AS (
    UPDATE {schema}.cron_cursors c
    SET next_plan_time = %(first)s::timestamptz, due_at = p.due_at, spec = %(spec)s,
        first_seen_at = now.t, retired_at = NULL, updated_at = now.t
    FROM pairs p, now
    WHERE p.id IS NOT NULL AND p.retired_at IS NOT NULL
      AND c.job_name = (SELECT %(job)s::text) AND c.scope_kind = p.kind AND c.scope_id = p.id
      AND c.retired_at IS NOT NULL
    RETURNING 1
),
seen AS (SELECT 1 FROM inserted UNION ALL SELECT 1 FROM revived)
SELECT (SELECT count(*) FROM seen) AS seen, (SELECT count(*) FROM retired) AS retired,
       (SELECT count(*) FROM respecified) AS respecified, (SELECT ok FROM agreed) AS agreed

-- name: lock_sight :exec
-- Before sight_cursors, in its transaction (a statement of its own, so sight_cursors' snapshot
-- is taken once the lock is held): one replica at a time writes a job's scope list, and each
-- reads the digest the one before it committed. Lists are written only when they change, so
-- replicas rarely wait here; when they do, they would otherwise wait for each other's cursor
-- rows.
SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))

-- name: due_cursors :many
-- The claim, first half: the job's cursors that are due, soonest first, locked for this
-- claim transaction (SKIP LOCKED: concurrent replicas take different ones). Read through the
-- due index: never the ledger's history. Under overlap="forbid" a cursor whose scope has a
-- RUNNING execution waits. The cursor's row lock is also what keeps the scope's other claims
-- out (claim_existing's retries, triggers and steals lock it too, see lock_existing_scopes):
-- claim_cursors' check for a RUNNING row runs after it (in a later statement, so it sees
-- every claim of the scope that released the row by committing). No advisory lock per scope:
-- a claim of thousands of scopes would hold thousands in PostgreSQL's shared lock table,
-- which every session of the server shares (64 entries per connection by default).
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
SELECT c.scope_kind, c.scope_id, c.next_plan_time, c.spec, c.first_seen_at, c.last_plan_time,
       (SELECT t FROM now) AS now, c.ctid::text AS tid,
       -- the job's last pause and resume (one probe of job_state for the statement)
       (SELECT j.paused_at FROM {schema}.job_state j WHERE j.job_name = %(job)s) AS paused_at,
       (SELECT j.resumed_at FROM {schema}.job_state j WHERE j.job_name = %(job)s) AS resumed_at
FROM {schema}.cron_cursors c
WHERE c.job_name = %(job)s AND c.due_at IS NOT NULL
  AND c.due_at <= (SELECT t FROM now) - %(delay)s
  AND (NOT %(forbid)s OR (
        (SELECT t FROM now) < coalesce(%(running_before)s::timestamptz, 'infinity')
        AND NOT EXISTS (
            SELECT 1 FROM {schema}.cron_executions r
            WHERE r.job_name = (SELECT %(job)s::text) AND r.scope_kind = c.scope_kind
              AND r.scope_id = c.scope_id AND r.status = 'RUNNING'
              AND r.plan_time < coalesce(%(running_before)s::timestamptz, 'infinity')
              AND (r.exclusive OR r.stale_after >= (SELECT t FROM now)))))
ORDER BY c.due_at
LIMIT %(limit)s
FOR UPDATE OF c SKIP LOCKED

-- name: claim_cursors :many
-- The claim, second half: INSERT ... ON CONFLICT DO NOTHING of RUNNING rows for the chosen
-- plans, in one canonical key order, and each cursor moved on to its next plan. A cursor is
-- moved only once every plan chosen for it has a row: inserted here, or there already (a
-- backfill, a trigger, or a replica of an earlier version had it). One whose insert met a
-- concurrent claim's exclusive row (overlap="forbid") stays due. Under overlap="forbid" the
-- row is its scope's `exclusive` one. Each cursor is moved where due_cursors read it (its
-- `tid`; the row lock taken then keeps it there): a fetch by address, where a join of the
-- moves with the job's cursors by key was planned as a hash of all of them. `unmoved` counts
-- cursors not found at their address (never expected): the caller then rolls the claim back.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
p AS MATERIALIZED (
    SELECT * FROM unnest(%(plan_kinds)b::text[], %(plan_ids)b::text[],
                         %(plans)b::timestamptz[]) AS p(kind, id, plan_time)
),
m AS MATERIALIZED (
    SELECT * FROM unnest(%(kinds)b::text[], %(ids)b::text[], %(nexts)b::timestamptz[],
                         %(dues)b::timestamptz[], %(lasts)b::timestamptz[],
                         %(tids)b::text[]::tid[])
             AS m(kind, id, next_plan, due_at, last_plan, tid)
),
ins AS (
    INSERT INTO {schema}.cron_executions AS x
        (job_name, scope_kind, scope_id, plan_time, trigger, status, attempt, max_attempts,
         exclusive, runner_id, heartbeat_at, stale_after, started_at, created_at, updated_at)
    SELECT %(job)s, p.kind, p.id, p.plan_time, 'schedule', 'RUNNING', 1, %(max_attempts)s,
           %(forbid)s, %(runner)s, now.t, now.t + %(stale_timeout)s, now.t, now.t, now.t
    FROM p, now
    -- overlap="forbid": not while the scope has a RUNNING row (this statement starts after
    -- due_cursors locked the scope's cursor, so it sees every claim that held it before)
    WHERE NOT %(forbid)s OR (
        now.t < coalesce(%(running_before)s::timestamptz, 'infinity') AND NOT EXISTS (
            SELECT 1 FROM {schema}.cron_executions r
            WHERE r.job_name = (SELECT %(job)s::text) AND r.scope_kind = p.kind AND r.scope_id = p.id
              AND r.status = 'RUNNING' AND r.plan_time < coalesce(%(running_before)s::timestamptz, 'infinity')
              AND (r.exclusive OR r.stale_after >= now.t)))
    ORDER BY p.kind, p.id, p.plan_time
    ON CONFLICT DO NOTHING
    RETURNING x.id, x.scope_kind, x.scope_id, x.plan_time, x.lease_token, x.fencing_token,
              x.started_at
),
-- The plans this insert did not take (usually none), and of those the ones with no row at
-- all (not there already, from a backfill, a trigger or an earlier version's replica): their
-- cursors stay due. Only those plans are looked up, one probe of the plan key each (a
-- subquery with LIMIT, which the planner cannot turn into a join): an EXISTS over every
-- chosen plan was planned as a hash join over a sequential scan of the job's whole ledger.
untaken AS MATERIALIZED (
    SELECT p.kind, p.id, p.plan_time FROM p
    LEFT JOIN ins i ON i.scope_kind = p.kind AND i.scope_id = p.id AND i.plan_time = p.plan_time
    WHERE i.scope_id IS NULL
),
lacking AS MATERIALIZED (  -- cursors with a chosen plan that has no row: they stay due
    SELECT DISTINCT u.kind, u.id FROM untaken u
    WHERE (SELECT true FROM {schema}.cron_executions e
           WHERE e.job_name = (SELECT %(job)s::text) AND e.scope_kind = u.kind AND e.scope_id = u.id
             AND e.plan_time = u.plan_time
             -- the claim's first and last plans: the planner leaves out the other partitions
             AND e.plan_time BETWEEN %(first_plan)s AND %(last_plan)s
           LIMIT 1) IS NULL
),
moved AS (
    UPDATE {schema}.cron_cursors c
    SET next_plan_time = m.next_plan, due_at = m.due_at, spec = %(spec)s, updated_at = now.t,
        -- a cursor moved has a row for each of its plans: the latest is its last one
        last_plan_time = greatest(c.last_plan_time, m.last_plan)
    FROM m, now
    WHERE c.ctid = m.tid
      AND c.job_name = %(job)s AND c.scope_kind = m.kind AND c.scope_id = m.id
      AND NOT EXISTS (SELECT 1 FROM lacking x WHERE x.kind = m.kind AND x.id = m.id)
    RETURNING c.scope_kind
)
SELECT ins.id, ins.scope_kind, ins.scope_id, ins.plan_time, ins.lease_token, ins.fencing_token,
       ins.started_at, NULL::jsonb AS payload,
       (SELECT count(*) FROM m) - (SELECT count(*) FROM moved) - (SELECT count(*) FROM lacking)
         AS unmoved
FROM (SELECT 1) AS one
LEFT JOIN ins ON true

-- name: due_cursors_of_jobs :many
-- due_cursors for several jobs in one statement, the first half of a joint claim (the due
-- entries of a beat_schedule, each a job, claimed in one transaction instead of one each).
-- Only jobs whose claim is the plain one take part: code-defined, no max_running, nothing to
-- take over (engine/joint.py). Each job's cursors are read through the due index, soonest
-- first, at most its own limit, locked (SKIP LOCKED: concurrent replicas take different
-- ones); under the job's overlap="forbid", not a cursor whose scope has a RUNNING execution.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
j AS MATERIALIZED (
    SELECT * FROM unnest(%(jobs)b::text[], %(delays)b::interval[], %(limits)b::int[],
                         %(forbids)b::bool[])
             AS j(job, delay, lim, forbid)
)
SELECT c.scope_kind, c.scope_id, c.next_plan_time, c.spec, c.first_seen_at, c.last_plan_time,
       (SELECT t FROM now) AS now, c.tid, s.paused_at, s.resumed_at, j.job
FROM j
LEFT JOIN {schema}.job_state s ON s.job_name = j.job
CROSS JOIN LATERAL (
    SELECT c.scope_kind, c.scope_id, c.next_plan_time, c.spec, c.first_seen_at,
           c.last_plan_time, c.ctid::text AS tid
    FROM {schema}.cron_cursors c
    WHERE c.job_name = j.job AND c.due_at IS NOT NULL
      AND c.due_at <= (SELECT t FROM now) - j.delay
      AND (NOT j.forbid OR (
            (SELECT t FROM now) < coalesce(%(running_before)s::timestamptz, 'infinity')
            AND NOT EXISTS (
                SELECT 1 FROM {schema}.cron_executions r
                WHERE r.job_name = j.job AND r.scope_kind = c.scope_kind
                  AND r.scope_id = c.scope_id AND r.status = 'RUNNING'
                  AND r.plan_time < coalesce(%(running_before)s::timestamptz, 'infinity')
                  AND (r.exclusive OR r.stale_after >= (SELECT t FROM now)))))
    ORDER BY c.due_at
    LIMIT j.lim
    FOR UPDATE OF c SKIP LOCKED
) c

-- name: claim_cursors_of_jobs :many
-- claim_cursors for several jobs in one statement, the second half of a joint claim: the
-- chosen plans' RUNNING rows inserted in one canonical key order, and each cursor moved on
-- where due_cursors_of_jobs read it, only once every plan chosen for it has a row (see
-- claim_cursors). Each job's spec, max_attempts, stale_timeout and overlap come with it.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
j AS MATERIALIZED (
    SELECT * FROM unnest(%(jobs)b::text[], %(specs)b::text[], %(max_attempts)b::int[],
                         %(stale_timeouts)b::interval[], %(forbids)b::bool[])
             AS j(job, spec, max_attempts, stale_timeout, forbid)
),
p AS MATERIALIZED (
    SELECT * FROM unnest(%(plan_jobs)b::text[], %(plan_kinds)b::text[], %(plan_ids)b::text[],
                         %(plans)b::timestamptz[]) AS p(job, kind, id, plan_time)
),
m AS MATERIALIZED (
    SELECT * FROM unnest(%(move_jobs)b::text[], %(kinds)b::text[], %(ids)b::text[],
                         %(nexts)b::timestamptz[], %(dues)b::timestamptz[],
                         %(lasts)b::timestamptz[], %(tids)b::text[]::tid[])
             AS m(job, kind, id, next_plan, due_at, last_plan, tid)
),
ins AS (
    INSERT INTO {schema}.cron_executions AS x
        (job_name, scope_kind, scope_id, plan_time, trigger, status, attempt, max_attempts,
         exclusive, runner_id, heartbeat_at, stale_after, started_at, created_at, updated_at)
    SELECT p.job, p.kind, p.id, p.plan_time, 'schedule', 'RUNNING', 1, j.max_attempts,
           j.forbid, %(runner)s, now.t, now.t + j.stale_timeout, now.t, now.t, now.t
    FROM p JOIN j ON j.job = p.job, now
    -- overlap="forbid": not while the scope has a RUNNING row (as in claim_cursors)
    WHERE NOT j.forbid OR (
        now.t < coalesce(%(running_before)s::timestamptz, 'infinity') AND NOT EXISTS (
            SELECT 1 FROM {schema}.cron_executions r
            WHERE r.job_name = p.job AND r.scope_kind = p.kind AND r.scope_id = p.id
              AND r.status = 'RUNNING'
              AND r.plan_time < coalesce(%(running_before)s::timestamptz, 'infinity')
              AND (r.exclusive OR r.stale_after >= now.t)))
    ORDER BY p.job, p.kind, p.id, p.plan_time
    ON CONFLICT DO NOTHING
    RETURNING x.job_name, x.id, x.scope_kind, x.scope_id, x.plan_time, x.lease_token,
              x.fencing_token, x.started_at
),
untaken AS MATERIALIZED (
    SELECT p.job, p.kind, p.id, p.plan_time FROM p
    LEFT JOIN ins i ON i.job_name = p.job AND i.scope_kind = p.kind AND i.scope_id = p.id
                   AND i.plan_time = p.plan_time
    WHERE i.scope_id IS NULL
),
lacking AS MATERIALIZED (  -- cursors with a chosen plan that has no row: they stay due
    SELECT DISTINCT u.job, u.kind, u.id FROM untaken u
    WHERE (SELECT true FROM {schema}.cron_executions e
           WHERE e.job_name = u.job AND e.scope_kind = u.kind AND e.scope_id = u.id
             AND e.plan_time = u.plan_time
             AND e.plan_time BETWEEN %(first_plan)s AND %(last_plan)s
           LIMIT 1) IS NULL
),
moved AS (
    UPDATE {schema}.cron_cursors c
    SET next_plan_time = m.next_plan, due_at = m.due_at, spec = j.spec, updated_at = now.t,
        last_plan_time = greatest(c.last_plan_time, m.last_plan)
    FROM m JOIN j ON j.job = m.job, now
    WHERE c.ctid = m.tid
      AND c.job_name = m.job AND c.scope_kind = m.kind AND c.scope_id = m.id
      AND NOT EXISTS (SELECT 1 FROM lacking x
                      WHERE x.job = m.job AND x.kind = m.kind AND x.id = m.id)
    RETURNING c.scope_kind
)
SELECT ins.id, ins.scope_kind, ins.scope_id, ins.plan_time, ins.lease_token, ins.fencing_token,
       ins.started_at, NULL::jsonb AS payload,
       (SELECT count(*) FROM m) - (SELECT count(*) FROM moved) - (SELECT count(*) FROM lacking)
         AS unmoved,
       ins.job_name AS job
FROM (SELECT 1) AS one
LEFT JOIN ins ON true

-- name: record_skips :exec
-- The spans of plans a claim decided not to run, in its transaction (only a claim that
-- skipped something runs it). A span whose scope and reason already have one ending at the
-- plan just before it extends that one (found through cron_skips_scope_last_idx); the others
-- are new rows. `n` tells the spans of one statement apart: a scope may have two of a reason
-- (superseded before and after a pause). A span recorded already (a cursor re-planned from
-- its last claimed plan after a schedule change) keeps the larger of the two.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
s AS MATERIALIZED (
    SELECT * FROM unnest(%(kinds)b::text[], %(ids)b::text[], %(reasons)b::text[],
                         %(firsts)b::timestamptz[], %(lasts)b::timestamptz[],
                         %(counts)b::int[], %(previous)b::timestamptz[])
             WITH ORDINALITY AS s(kind, id, reason, first_plan, last_plan, plans, previous, n)
),
extended AS (
    UPDATE {schema}.cron_skips k
    SET last_plan = s.last_plan, plans = k.plans + s.plans, updated_at = now.t
    FROM s, now
    WHERE k.job_name = %(job)s AND k.scope_kind = s.kind AND k.scope_id = s.id
      AND k.reason = s.reason AND k.last_plan = s.previous
    RETURNING s.n
)
INSERT INTO {schema}.cron_skips AS k
    (job_name, scope_kind, scope_id, reason, first_plan, last_plan, plans, recorded_at,
     updated_at)
SELECT %(job)s, s.kind, s.id, s.reason, s.first_plan, s.last_plan, s.plans, now.t, now.t
FROM s, now
WHERE s.n NOT IN (SELECT n FROM extended)
ORDER BY s.kind, s.id, s.first_plan
ON CONFLICT (job_name, scope_kind, scope_id, first_plan, reason) DO UPDATE
SET last_plan = greatest(k.last_plan, EXCLUDED.last_plan),
    plans = greatest(k.plans, EXCLUDED.plans), updated_at = EXCLUDED.updated_at

-- name: prune_skips :one
-- Retention of the skipped spans, with the ledger's: the spans whose last plan is older than
-- the cutoff (cron_skips_last_idx), a batch at a time.
WITH gone AS (
    DELETE FROM {schema}.cron_skips
    WHERE ctid IN (SELECT ctid FROM {schema}.cron_skips
                   WHERE last_plan < clock_timestamp() - %(older_than)s
                   LIMIT %(batch)s)
    RETURNING 1
)
SELECT count(*) AS deleted FROM gone

-- name: heartbeat :many
-- (Array parameters go in binary, "b" placeholders: dumping them as text costs the replica several
-- times the CPU per row.)
-- Renews every lease this replica holds in one statement; ids missing from the result
-- were lost (stolen or closed out). Each lease's plan time names its partition (pruned as
-- the statement runs), so a lookup by id reads one partition's id index, not every one's;
-- the batch's first and last plan times prune the partitions before it runs, so the
-- per-lease pruning chooses among those few rather than among every partition.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
UPDATE {schema}.cron_executions e
SET heartbeat_at = now.t, stale_after = now.t + make_interval(secs => b.stale_timeout_s),
    updated_at = now.t
FROM unnest(%(ids)b::uuid[], %(tokens)b::uuid[], %(plans)b::timestamptz[],
            %(stale_timeouts)b::float8[])
     AS b(id, token, plan_time, stale_timeout_s),
     now
WHERE e.id = b.id AND e.lease_token = b.token AND e.plan_time = b.plan_time
  AND e.plan_time BETWEEN %(first_plan)s AND %(last_plan)s
  AND e.status = 'RUNNING'
RETURNING e.id

-- name: finish :many
-- Terminal writes of a batch, each guarded by its lease token; ids missing from the
-- result lost their lease and wrote nothing. A FAILED attempt (retried or final) is kept in
-- cron_attempts by the same statement, with its traceback. The plan times prune the
-- partitions read, as for heartbeat.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
done AS (
    UPDATE {schema}.cron_executions e
    SET status = b.status, finished_at = now.t, updated_at = now.t,
        duration_ms = b.duration_ms, rows_affected = b.rows_affected,
        result = coalesce(b.result::jsonb, '{{}}'), error_code = b.error_code,
        error_msg = left(b.error_msg, 4000),
        next_retry_at = CASE WHEN b.status = 'FAILED'
                                  AND e.attempt < e.max_attempts + CASE WHEN e.stolen
                                                                        THEN 1 ELSE 0 END
                             THEN now.t + make_interval(secs => b.retry_delay) END
    FROM unnest(%(ids)b::uuid[], %(tokens)b::uuid[], %(plans)b::timestamptz[],
                %(statuses)b::text[], %(error_codes)b::text[], %(error_msgs)b::text[],
                %(rows)b::bigint[], %(results)b::text[], %(durations)b::integer[],
                %(retry_delays)b::float8[], %(tracebacks)b::text[])
         AS b(id, token, plan_time, status, error_code, error_msg, rows_affected, result,
              duration_ms, retry_delay, traceback),
         now
    WHERE e.id = b.id AND e.lease_token = b.token AND e.plan_time = b.plan_time
      AND e.plan_time BETWEEN %(first_plan)s AND %(last_plan)s
      AND e.status = 'RUNNING'
    RETURNING e.id, e.next_retry_at, e.status, e.fencing_token, e.attempt, e.runner_id,
              e.started_at, e.finished_at, e.error_code, e.error_msg, b.traceback, e.plan_time
),
kept AS (
    INSERT INTO {schema}.cron_attempts
        (execution_id, fencing_token, attempt, runner_id, started_at, finished_at, error_code,
         error_msg, traceback, plan_time)
    SELECT d.id, d.fencing_token, d.attempt, d.runner_id, d.started_at, d.finished_at,
           d.error_code, d.error_msg, d.traceback, d.plan_time
    FROM done d WHERE d.status = 'FAILED'
    ON CONFLICT DO NOTHING
)
SELECT id, next_retry_at FROM done

-- name: reapply :one
-- After a failover, what this replica wrote to the previous server that the new one lacks (an
-- asynchronous standby promoted before it had the last commits). A row missing altogether is
-- inserted as this replica last wrote it (unless another row now holds its plan: that plan
-- was claimed again). A finished row found in an earlier state - a lower attempt, PENDING,
-- or still RUNNING under this replica's lease - is brought to the outcome written. A row
-- another replica has moved on since (a later attempt, or its own lease) is left alone.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
w AS MATERIALIZED (
    SELECT * FROM unnest(
        %(ids)b::uuid[], %(jobs)b::text[], %(kinds)b::text[], %(scope_ids)b::text[],
        %(plans)b::timestamptz[], %(triggers)b::text[], %(statuses)b::text[],
        %(attempts)b::integer[], %(max_attempts)b::integer[], %(runners)b::text[],
        %(tokens)b::uuid[], %(fencing)b::bigint[], %(exclusive)b::boolean[],
        %(stolen)b::boolean[], %(payloads)b::text[], %(started)b::timestamptz[], %(stale_timeouts)b::float8[],
        %(error_codes)b::text[], %(error_msgs)b::text[], %(rows)b::bigint[],
        %(results)b::text[], %(durations)b::integer[], %(retry_at)b::timestamptz[])
    AS w(id, job, kind, scope_id, plan_time, trigger, status, attempt, max_attempts, runner,
         token, fencing, exclusive, stolen, payload, started_at, stale_timeout_s, error_code, error_msg,
         rows_affected, result, duration_ms, next_retry_at)
),
brought AS (
    UPDATE {schema}.cron_executions e
    SET status = w.status, attempt = w.attempt, runner_id = w.runner, lease_token = w.token,
        fencing_token = w.fencing, started_at = w.started_at,
        finished_at = w.started_at + make_interval(secs => w.duration_ms / 1000.0),
        duration_ms = w.duration_ms, rows_affected = w.rows_affected,
        result = coalesce(w.result::jsonb, '{{}}'), error_code = w.error_code,
        error_msg = left(w.error_msg, 4000), next_retry_at = w.next_retry_at,
        stolen = e.stolen OR w.stolen, updated_at = now.t
    FROM w, now
    WHERE e.id = w.id AND e.plan_time = w.plan_time AND w.status <> 'RUNNING'
      AND (e.attempt < w.attempt
           OR (e.attempt = w.attempt
               AND (e.status = 'PENDING'
                    OR (e.status = 'RUNNING' AND e.lease_token = w.token))))
    RETURNING e.id
),
restored AS (
    INSERT INTO {schema}.cron_executions AS x
        (id, job_name, scope_kind, scope_id, plan_time, trigger, status, attempt,
         max_attempts, runner_id, lease_token, fencing_token, exclusive, stolen, payload,
         heartbeat_at, stale_after, started_at, finished_at, duration_ms, rows_affected,
         result, error_code, error_msg, next_retry_at, created_at, updated_at)
    SELECT w.id, w.job, w.kind, w.scope_id, w.plan_time, w.trigger, w.status, w.attempt,
           w.max_attempts, w.runner, w.token, w.fencing, w.exclusive, w.stolen,
           w.payload::jsonb,
           now.t, now.t + make_interval(secs => w.stale_timeout_s), w.started_at,
           CASE WHEN w.status <> 'RUNNING'
                THEN w.started_at + make_interval(secs => w.duration_ms / 1000.0) END,
           w.duration_ms, w.rows_affected, coalesce(w.result::jsonb, '{{}}'), w.error_code,
           left(w.error_msg, 4000), w.next_retry_at, coalesce(w.started_at, now.t), now.t
    FROM w, now
    ORDER BY w.id
    ON CONFLICT DO NOTHING
    RETURNING x.id
)
SELECT (SELECT count(*) FROM brought) AS brought, (SELECT count(*) FROM restored) AS restored

-- name: lease_status :opt
-- The status of an execution while this lease token holds it, no row once another holds it:
-- after a transactional run's connection was lost, whether its COMMIT landed.
SELECT status FROM {schema}.cron_executions
WHERE id = %(id)s AND lease_token = %(token)s AND plan_time = %(plan)s

-- name: lock_trigger_scope :exec
-- Before `trigger`, in its transaction: one trigger of a (job, scope) at a time, so its check
-- for a PENDING run-now sees the one a concurrent trigger just inserted.
SELECT pg_advisory_xact_lock(hashtextextended(
           %(lock_ns)s || %(job)s || chr(31) || %(kind)s || chr(31) || %(id)s, 1))

-- name: trigger :opt
-- A run-now (`run_now`: planned at `plan`, the database's clock or an `at` not in the
-- future), or a one-off at a future instant `plan`; the operations core chose the plan, never
-- a scheduled plan of the scope. The plan key keeps one row per (job, scope, plan_time), and
-- a run-now is not inserted while the scope has a PENDING run-now (a manual row planned no
-- later than it was created; lock_trigger_scope serialises the check): when either holds the
-- insert back, the row that holds it is returned with created = false.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
ins AS (
    INSERT INTO {schema}.cron_executions AS x
        (job_name, scope_kind, scope_id, plan_time, trigger, status, attempt, max_attempts,
         payload)
    SELECT %(job)s, %(kind)s, %(id)s, %(plan)s, 'manual', 'PENDING', 1, %(max_attempts)s,
           -- a dynamic job's scope: its schedule's payload
           (SELECT s.payload FROM {schema}.schedules s
            WHERE s.job_name = %(job)s AND s.scope_kind = %(kind)s AND s.scope_id = %(id)s)
    FROM now
    WHERE NOT %(run_now)s OR NOT EXISTS (
        SELECT 1 FROM {schema}.cron_executions e
        WHERE e.job_name = %(job)s AND e.status = 'PENDING' AND e.plan_time <= now.t
          AND e.scope_kind = %(kind)s AND e.scope_id = %(id)s AND e.trigger = 'manual'
          AND e.plan_time <= e.created_at)
    ON CONFLICT DO NOTHING
    RETURNING x.id, x.plan_time, x.status, true AS created, x.scope_kind, x.scope_id
)
SELECT id, plan_time, status, created, scope_kind, scope_id FROM ins
UNION ALL
(SELECT e.id, e.plan_time, e.status, false, e.scope_kind, e.scope_id
 FROM {schema}.cron_executions e, now
 WHERE NOT EXISTS (SELECT 1 FROM ins)
   AND e.job_name = %(job)s AND e.scope_kind = %(kind)s AND e.scope_id = %(id)s
   AND (e.plan_time = %(plan)s
        OR (%(run_now)s AND e.status = 'PENDING' AND e.trigger = 'manual'
            AND e.plan_time <= now.t AND e.plan_time <= e.created_at))
 -- the row at the very plan first: an explicit `at` is about that plan
 ORDER BY e.plan_time = %(plan)s DESC
 LIMIT 1)

-- name: scheduled_row :opt
-- The scheduled execution of one plan of a scope, if it has one (a trigger at that plan).
SELECT id, plan_time, status, false AS created, scope_kind, scope_id
FROM {schema}.cron_executions
WHERE job_name = %(job)s AND scope_kind = %(kind)s AND scope_id = %(id)s
  AND plan_time = %(plan)s AND trigger = 'schedule'

-- name: job_record :one
-- What a trigger needs to know of a job: its job_state row (none: `known` false), whether a
-- live replica (live_replicas) registers it, and the database's clock.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
SELECT j.job_name IS NOT NULL AS known, j.scopes, j.schedule, j.recurrence, j.max_attempts,
       j.upcoming,
       EXISTS (SELECT 1 FROM {schema}.live_replicas p
               WHERE %(job)s = ANY (p.jobs)) AS live,
       now.t AS now
FROM now LEFT JOIN {schema}.job_state j ON j.job_name = %(job)s

-- name: scope_cursor :opt
-- A code-defined job's scope: its next plan not yet claimed, settled unless its schedule
-- changed (the next claim computes it again) or the scope was retired.
SELECT next_plan_time, spec IS NOT NULL AND retired_at IS NULL AS settled
FROM {schema}.cron_cursors
WHERE job_name = %(job)s AND scope_kind = %(kind)s AND scope_id = %(id)s

-- name: backfill :many
-- Every plan for every scope, or (`pairs`) the given (scope, plan) pairs: a dynamic job's
-- scopes each have plans of their own. Rows carry the scope's schedule payload, if any.
INSERT INTO {schema}.cron_executions
    (job_name, scope_kind, scope_id, plan_time, trigger, status, attempt, max_attempts,
     payload)
SELECT %(job)s, v.kind, v.id, v.plan_time, 'backfill', 'PENDING', 1, %(max_attempts)s,
       (SELECT sc.payload FROM {schema}.schedules sc
        WHERE sc.job_name = %(job)s AND sc.scope_kind = v.kind AND sc.scope_id = v.id)
FROM (SELECT s.kind, s.id, p.plan_time
      FROM unnest(%(kinds)s::text[], %(ids)s::text[]) AS s(kind, id)
      CROSS JOIN unnest(%(plans)s::timestamptz[]) AS p(plan_time)
      WHERE NOT %(pairs)s
      UNION ALL
      SELECT q.kind, q.id, q.plan_time
      FROM unnest(%(kinds)s::text[], %(ids)s::text[], %(plans)s::timestamptz[])
           AS q(kind, id, plan_time)
      WHERE %(pairs)s) AS v
ORDER BY v.kind, v.id, v.plan_time
ON CONFLICT DO NOTHING
RETURNING id

-- name: cancel :opt
UPDATE {schema}.cron_executions
SET status = 'CANCELLED', finished_at = clock_timestamp(), updated_at = clock_timestamp()
WHERE id = %(id)s AND status = 'PENDING'
RETURNING id

-- name: execution_status :opt
SELECT status FROM {schema}.cron_executions WHERE id = %(id)s

-- name: set_paused :exec
-- A pause records when it began (a repeated pause keeps it), a resume when it ended: the
-- first claim after the resume skips the plans due in between (`paused`).
INSERT INTO {schema}.job_state AS j (job_name, paused, updated_at, paused_at)
VALUES (%(job)s, %(paused)s, clock_timestamp(),
        CASE WHEN %(paused)s THEN clock_timestamp() END)
ON CONFLICT (job_name) DO UPDATE
SET paused = EXCLUDED.paused, updated_at = EXCLUDED.updated_at,
    paused_at = CASE WHEN EXCLUDED.paused AND NOT j.paused THEN EXCLUDED.updated_at
                     ELSE j.paused_at END,
    resumed_at = CASE WHEN EXCLUDED.paused AND NOT j.paused THEN NULL
                      WHEN NOT EXCLUDED.paused AND j.paused THEN EXCLUDED.updated_at
                      ELSE j.resumed_at END

-- name: now :one
SELECT clock_timestamp() AS now

-- name: migrate_lock :exec
SELECT pg_advisory_xact_lock(hashtextextended(%(key)s, 0))

-- name: schema_exists :one
SELECT to_regnamespace(%(schema)s) IS NOT NULL AS present

-- name: create_schema :exec
-- Only when missing: even IF NOT EXISTS needs CREATE on the database, which an owner role
-- given a ready-made schema (sql/roles.sql) does not have.
CREATE SCHEMA IF NOT EXISTS {schema}

-- name: migrate_bootstrap :exec
CREATE TABLE IF NOT EXISTS {schema}.schema_migrations (
    version     text PRIMARY KEY,
    name        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT clock_timestamp()
)

-- name: applied_migrations :many
SELECT version FROM {schema}.schema_migrations

-- name: record_migration :exec
INSERT INTO {schema}.schema_migrations (version, name) VALUES (%(version)s, %(name)s)

-- name: has_migrations_table :one
SELECT to_regclass(%(table)s) IS NOT NULL AS present

-- name: register_jobs :exec
-- Records the jobs a replica runs (never touching the pause flag) and, in the same statement,
-- refreshes the replica's own row and removes the rows of replicas past their expiry.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
seen AS (
    INSERT INTO {schema}.replicas AS p
        (runner_id, host, version, jobs, http_address, started_at, seen_at, expires_at,
         live_until)
    SELECT %(runner)s, %(host)s, %(version)s, %(jobs)s::text[], %(http_address)s,
           %(started_at)s, now.t, now.t + %(expiry)s, now.t + %(live_for)s
    FROM now
    ON CONFLICT (runner_id) DO UPDATE
    SET host = EXCLUDED.host, version = EXCLUDED.version, jobs = EXCLUDED.jobs,
        http_address = EXCLUDED.http_address, started_at = EXCLUDED.started_at,
        seen_at = EXCLUDED.seen_at, expires_at = EXCLUDED.expires_at,
        live_until = EXCLUDED.live_until
    RETURNING p.runner_id
),
-- SKIP LOCKED: a row another replica is deleting is left to it, so two registrations never
-- wait for each other (nor deadlock against their job_state rows).
expired AS (
    DELETE FROM {schema}.replicas p
    WHERE p.runner_id IN (
        SELECT x.runner_id FROM {schema}.replicas x
        WHERE x.expires_at < (SELECT t FROM now) AND x.runner_id <> %(runner)s
        FOR UPDATE SKIP LOCKED)
    RETURNING p.runner_id
)
INSERT INTO {schema}.job_state AS j
    (job_name, paused, schedule, scopes, upcoming, recurrence, max_attempts, seen_at, seen_by,
     updated_at)
SELECT r.job_name, false, r.schedule, r.scopes, r.upcoming::timestamptz[], r.recurrence::jsonb,
       r.max_attempts, now.t, %(runner)s, now.t
FROM unnest(%(jobs)s::text[], %(schedules)s::text[], %(scopes)s::text[], %(upcoming)s::text[],
            %(recurrences)s::text[], %(max_attempts)s::int[])
     AS r(job_name, schedule, scopes, upcoming, recurrence, max_attempts), now
ORDER BY r.job_name
ON CONFLICT (job_name) DO UPDATE
SET schedule = EXCLUDED.schedule, scopes = EXCLUDED.scopes, upcoming = EXCLUDED.upcoming,
    recurrence = EXCLUDED.recurrence, max_attempts = EXCLUDED.max_attempts,
    seen_at = EXCLUDED.seen_at,
    seen_by = EXCLUDED.seen_by

-- name: analyze_cursors :exec
-- After a sighting wrote thousands of cursors (a first deploy, a scope list grown at once):
-- the planner's figures for the table are otherwise those of before, until autovacuum comes
-- by, and claims planned on them sorted every due cursor of a 100,000-scope job to take the
-- first batch. Only the table's owner may: for any other role
-- the server skips it with a warning.
ANALYZE {schema}.cron_cursors

-- name: analyze_schedules :exec
-- After a put wrote thousands of schedules (a bulk put, a first import): until autovacuum came
-- by, the planner took the job for a few rows, and each claim of 256 due schedules hashed all
-- of the job's schedules twice (the insert's payload join and the schedules' move). Only the
-- table's owner may: for any other role the server skips it with a warning.
ANALYZE {schema}.schedules

-- name: scope_digests :many
-- The digests of the scope lists the live replicas last wrote, by job (sight_cursors): whether
-- a job's replicas agree on its scopes, and whether the caller's own row still holds its own
-- (a row deleted past its expiry comes back empty at the next registration).
SELECT runner_id, jobs, scope_digests AS digests
FROM {schema}.replicas
WHERE expires_at >= clock_timestamp()

-- name: unregister_replica :exec
-- A replica that stops cleanly removes its row.
DELETE FROM {schema}.replicas WHERE runner_id = %(runner)s

-- name: list_replicas :many
-- The live replicas (the view live_replicas, migration 0025: rows renewed within three of
-- their renewal intervals), by runner id. A row past that but not past its expiry is a
-- replica that stopped renewing: shown gone, removed later.
SELECT runner_id, host, version, jobs, http_address, started_at, seen_at
FROM {schema}.live_replicas
ORDER BY runner_id

-- name: forget_job :one
-- Removes a job no live replica (live_replicas) registers from job_state (its
-- history rows stay); returns the live replicas that still register it instead when there
-- are any (then nothing changes).
WITH live AS (
    SELECT p.runner_id FROM {schema}.live_replicas p
    WHERE %(job)s = ANY (p.jobs)
),
gone AS (
    DELETE FROM {schema}.job_state j
    WHERE j.job_name = %(job)s AND NOT EXISTS (SELECT 1 FROM live)
    RETURNING j.job_name
)
SELECT (SELECT count(*) FROM gone) AS forgotten,
       (SELECT coalesce(array_agg(runner_id ORDER BY runner_id), '{{}}') FROM live) AS live

-- name: job_scopes_mode :opt
-- What replicas recorded the job runs for (scopes_mode in pgsched/_jobs/spec.py); no row when
-- no replica registered the job, NULL when none of this version did.
SELECT scopes FROM {schema}.job_state WHERE job_name = %(job)s

-- name: planned_scopes :many
-- The scopes a job whose scopes are listed or computed in code has now: those whose cursor
-- is not retired. A job no replica of this version has planned yet has no cursor: then the
-- scopes with a scheduled plan in the day up to the job's latest one (a plan's scopes may be
-- claimed over several ticks, so one plan alone can miss some). With `kind`, only that
-- scope, if it is one.
WITH cur AS MATERIALIZED (
    SELECT c.scope_kind, c.scope_id, c.retired_at FROM {schema}.cron_cursors c
    WHERE c.job_name = %(job)s
)
SELECT c.scope_kind, c.scope_id FROM cur c
WHERE c.retired_at IS NULL
  AND (%(kind)s::text IS NULL OR (c.scope_kind = %(kind)s AND c.scope_id = %(id)s))
UNION ALL
SELECT DISTINCT e.scope_kind, e.scope_id FROM {schema}.cron_executions e
WHERE NOT EXISTS (SELECT 1 FROM cur)
  AND e.job_name = %(job)s AND e.trigger = 'schedule'
  AND e.plan_time > (SELECT max(l.plan_time) FROM {schema}.cron_executions l
                     WHERE l.job_name = %(job)s AND l.trigger = 'schedule')
                    - interval '1 day'
  AND (%(kind)s::text IS NULL OR (e.scope_kind = %(kind)s AND e.scope_id = %(id)s))
ORDER BY 1, 2

-- name: schedule_scopes :many
-- The scopes of a dynamic job: one per stored schedule. With `kind`, only that one.
SELECT s.scope_kind, s.scope_id FROM {schema}.schedules s
WHERE s.job_name = %(job)s
  AND (%(kind)s::text IS NULL OR (s.scope_kind = %(kind)s AND s.scope_id = %(id)s))
ORDER BY s.scope_kind, s.scope_id

-- name: job_schedule :opt
SELECT schedule FROM {schema}.job_state WHERE job_name = %(job)s

-- name: job_exists :one
SELECT EXISTS (SELECT 1 FROM {schema}.job_state WHERE job_name = %(job)s) AS known

-- name: job_known :one
-- A job any record names: its job_state row, a row of its in the ledger (one index probe of
-- job_plan), or a live replica that registers it.
SELECT EXISTS (SELECT 1 FROM {schema}.job_state WHERE job_name = %(job)s)
       OR EXISTS (SELECT 1 FROM {schema}.cron_executions WHERE job_name = %(job)s)
       OR EXISTS (SELECT 1 FROM {schema}.replicas
                  WHERE expires_at >= clock_timestamp() AND %(job)s = ANY (jobs)) AS known

-- name: job_summary :many
-- One row per known job: what `pgsched status`, the gauges and the status page show.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
SELECT j.job_name AS job, j.paused, j.schedule, j.seen_at, j.seen_by,
       last.plan_time AS last_plan, last.status AS last_status,
       -- the latest successful plan's finish, read newest plan first (job_plan index)
       (SELECT e.finished_at FROM {schema}.cron_executions e
        WHERE e.job_name = j.job_name AND e.status = 'SUCCESS'
        ORDER BY e.plan_time DESC LIMIT 1) AS last_success,
       (SELECT count(*) FROM {schema}.cron_executions e
        WHERE e.job_name = j.job_name AND e.status = 'RUNNING'
          AND e.stale_after >= (SELECT t FROM now)) AS running,
       (SELECT count(*) FROM {schema}.cron_executions e
        WHERE e.job_name = j.job_name AND e.status = 'RUNNING'
          AND e.stale_after < (SELECT t FROM now)) AS stale,
       -- FAILED with no retry left: all FAILED rows less those awaiting a retry (few at any
       -- time). Both counts are index-only scans of partial indexes (failed_job, retry), where
       -- reading next_retry_at from each FAILED row of a long history took seconds.
       (SELECT count(*) FROM {schema}.cron_executions e
        WHERE e.job_name = j.job_name AND e.status = 'FAILED')
       - (SELECT count(*) FROM {schema}.cron_executions e
          WHERE e.job_name = j.job_name AND e.status = 'FAILED'
            AND e.next_retry_at IS NOT NULL) AS failed,
       (SELECT count(*) FROM {schema}.cron_executions e
        WHERE e.job_name = j.job_name AND e.status = 'PENDING') AS pending,
       -- dynamic jobs: their schedules, how many are paused, the next plan due
       dyn.schedules, dyn.schedules_paused, dyn.next_due,
       -- the next plan: a dynamic job's earliest schedule's, else the first of the plans its
       -- replicas registered still ahead (none once no replica has planned it for a while)
       CASE WHEN j.schedule = 'dynamic' THEN dyn.next_due
            ELSE (SELECT min(u.p) FROM unnest(j.upcoming) AS u(p) WHERE u.p > (SELECT t FROM now))
       END AS next_plan,
       EXISTS (SELECT 1 FROM {schema}.live_replicas p
               WHERE j.job_name = ANY (p.jobs)) AS live
FROM {schema}.job_state j
LEFT JOIN LATERAL (
    SELECT count(*) AS schedules, count(*) FILTER (WHERE s.paused) AS schedules_paused,
           (SELECT min(n.next_plan_time) FROM {schema}.schedules n
            WHERE n.job_name = j.job_name AND NOT n.paused
              AND n.next_plan_time IS NOT NULL) AS next_due
    FROM {schema}.schedules s
    WHERE s.job_name = j.job_name AND j.schedule = 'dynamic'
    HAVING j.schedule = 'dynamic'
) AS dyn ON true
LEFT JOIN LATERAL (
    -- scheduled or started: a manual row still ahead (a future or cancelled trigger) is not
    -- the job's last plan
    SELECT e.plan_time, e.status FROM {schema}.cron_executions e
    WHERE e.job_name = j.job_name AND (e.trigger = 'schedule' OR e.started_at IS NOT NULL)
    ORDER BY e.plan_time DESC LIMIT 1
) AS last ON true
ORDER BY j.job_name

-- name: list_runs :many
-- The newest plans first, in keyset order (plan_time DESC, job, scope kind, scope id), from
-- the row after `after_*` when given: each job's rows read in plan order through an index
-- that leads with the job (job_plan, one plan's scopes sorted; the plan key for one scope;
-- the partial ones of RUNNING and PENDING rows), so a long history is never sorted whole,
-- then merged. Planned
-- for each call's filters (a generic plan could use none of the scope's or status's indexes,
-- nor the bound on plan_time the keyset gives). The jobs are the one asked for, else every
-- job the ledger holds, found by skipping from one job name to the next (one index probe
-- each). The keyset's rows of its own plan that come before it are read and dropped: at most
-- one plan's fan-out of one job.
WITH RECURSIVE jobs AS (
    (SELECT e.job_name FROM {schema}.cron_executions e
     WHERE %(job)s::text IS NULL ORDER BY e.job_name LIMIT 1)
    UNION ALL
    SELECT (SELECT e.job_name FROM {schema}.cron_executions e
            WHERE e.job_name > jobs.job_name ORDER BY e.job_name LIMIT 1)
    FROM jobs WHERE jobs.job_name IS NOT NULL
)
SELECT r.* FROM (
    SELECT %(job)s::text AS job_name WHERE %(job)s::text IS NOT NULL
    UNION ALL
    SELECT jobs.job_name FROM jobs WHERE jobs.job_name IS NOT NULL
) AS j
CROSS JOIN LATERAL (
    SELECT id, job_name AS job, scope_kind, scope_id, plan_time, trigger, status, attempt,
           max_attempts, next_retry_at, runner_id, fencing_token, heartbeat_at, stale_after,
           started_at, finished_at, duration_ms, rows_affected, result, payload, error_code,
           error_msg, created_at, (status = 'RUNNING' AND stale_after < clock_timestamp()) AS stale
    FROM {schema}.cron_executions e
    WHERE e.job_name = j.job_name
      AND (%(status)s::text IS NULL OR status = %(status)s)
      AND (%(kind)s::text IS NULL OR (scope_kind = %(kind)s AND scope_id = %(id)s))
      AND (%(since)s::timestamptz IS NULL OR plan_time >= %(since)s)
      AND (%(until)s::timestamptz IS NULL OR plan_time < %(until)s)
      AND (%(after_plan)s::timestamptz IS NULL OR plan_time <= %(after_plan)s)
      AND (%(after_plan)s::timestamptz IS NULL OR plan_time < %(after_plan)s
           OR (e.job_name, scope_kind, scope_id)
              > (%(after_job)s::text, %(after_kind)s::text, %(after_id)s::text))
    ORDER BY plan_time DESC, scope_kind, scope_id
    LIMIT %(limit)s
) AS r
ORDER BY r.plan_time DESC, r.job, r.scope_kind, r.scope_id
LIMIT %(limit)s

-- name: get_run :opt
SELECT id, job_name AS job, scope_kind, scope_id, plan_time, trigger, status, attempt, max_attempts,
       next_retry_at, runner_id, fencing_token, heartbeat_at, stale_after, started_at,
       finished_at, duration_ms, rows_affected, result, payload, error_code, error_msg,
       created_at, (status = 'RUNNING' AND stale_after < clock_timestamp()) AS stale
FROM {schema}.cron_executions
WHERE id = %(id)s

-- name: run_attempts :many
-- Every attempt of one execution in order: those kept in cron_attempts, then the row's own
-- latest attempt when it is not among them (running, succeeded, or ended before version 8).
SELECT a.attempt, a.runner_id, a.fencing_token, a.started_at, a.finished_at,
       coalesce(a.status, 'FAILED') AS status, a.error_code, a.error_msg, a.traceback
FROM {schema}.cron_attempts a
WHERE a.execution_id = %(id)s
UNION ALL
SELECT e.attempt, e.runner_id, e.fencing_token, e.started_at, e.finished_at,
       CASE WHEN e.status = 'RUNNING' AND e.stale_after < clock_timestamp() THEN 'STALE'
            ELSE e.status END,
       e.error_code, e.error_msg, NULL
FROM {schema}.cron_executions e
WHERE e.id = %(id)s AND e.started_at IS NOT NULL AND e.status <> 'PENDING'
  AND NOT EXISTS (SELECT 1 FROM {schema}.cron_attempts a
                  WHERE a.execution_id = e.id AND a.fencing_token = e.fencing_token)
ORDER BY 1, 5 NULLS LAST

-- name: record_task_attempt :opt
-- A consumer's run of the task an execution sent (pgsched.celery.track: a Celery worker's),
-- kept as an attempt numbered after the execution's own, with a fencing token of its own (one
-- row per run, even for runs of one task at once). It started `elapsed` seconds before now, on
-- the database's clock. Nothing when the execution does not exist (pruned, or a task id that
-- only looks like one). A final outcome (`final`: SUCCESS, or the task's failure; not a run
-- Celery retries) of a Celery job's task (celery:<entry>, or the dynamic job celery) becomes
-- the execution's status in the same statement: FAILED 'task_failed' with no retry (sending it
-- again would run the task twice), or SUCCESS again after a later run succeeded. Only a row
-- its publish made SUCCESS (to FAILED), or one a run made FAILED, changes (checked again on
-- the row as updated: EvalPlanQual); a success of a SUCCESS row writes nothing more. The
-- publish's own attempt is kept before its row turns FAILED, so `runs show` still shows it as
-- the beat's success. A row still RUNNING (its publish not yet written) is left as it is, and
-- the worker calls settle_task once it is written. `changed`: the execution's status was set
-- to the outcome.
WITH e AS MATERIALIZED (
    SELECT x.id, x.plan_time, x.attempt, x.status, x.error_code, x.job_name, x.fencing_token,
           x.runner_id, x.started_at, x.finished_at
    FROM {schema}.cron_executions x
    WHERE x.id = %(id)s
),
kept AS (
    INSERT INTO {schema}.cron_attempts
        (execution_id, fencing_token, attempt, runner_id, started_at, finished_at, status,
         error_code, error_msg, traceback, plan_time)
    SELECT e.id, {schema}.next_fencing_token(),
           greatest(e.attempt, (SELECT max(a.attempt) FROM {schema}.cron_attempts a
                                WHERE a.execution_id = e.id)) + 1,
           %(runner_id)s, clock_timestamp() - make_interval(secs => %(elapsed)s),
           clock_timestamp(), %(status)s, %(error_code)s, left(%(error_msg)s, 4000),
           %(traceback)s, e.plan_time
    FROM e
    RETURNING attempt
),
settles AS MATERIALIZED (
    SELECT e.* FROM e
    WHERE %(final)s AND (e.job_name = 'celery' OR starts_with(e.job_name, 'celery:'))
      AND ((e.status = 'SUCCESS' AND %(status)s = 'FAILED')
           OR (e.status = 'FAILED' AND e.error_code = 'task_failed'))
),
sent AS (
    INSERT INTO {schema}.cron_attempts
        (execution_id, fencing_token, attempt, runner_id, started_at, finished_at, status,
         plan_time)
    SELECT s.id, s.fencing_token, s.attempt, s.runner_id, s.started_at, s.finished_at,
           'SUCCESS', s.plan_time
    FROM settles s WHERE s.status = 'SUCCESS'
    ON CONFLICT DO NOTHING
),
settled AS (
    UPDATE {schema}.cron_executions x
    SET status = %(status)s,
        error_code = CASE WHEN %(status)s = 'FAILED' THEN 'task_failed' END,
        error_msg = CASE WHEN %(status)s = 'FAILED' THEN left(%(error_msg)s, 4000) END,
        next_retry_at = NULL, updated_at = clock_timestamp()
    FROM settles s
    WHERE x.id = s.id AND x.plan_time = s.plan_time
      AND ((x.status = 'SUCCESS' AND %(status)s = 'FAILED')
           OR (x.status = 'FAILED' AND x.error_code = 'task_failed'))
    RETURNING x.status
)
SELECT kept.attempt, coalesce((SELECT status FROM settled), e.status) AS execution_status,
       EXISTS (SELECT 1 FROM settled) AS changed
FROM kept, e

-- name: settle_task :opt
-- What record_task_attempt does to the execution's status, for an outcome it kept while the
-- row was still RUNNING (the worker ran the task before the beat had written its publish):
-- the newest final outcome a consumer recorded (SUCCESS, or a 'task_failed' attempt; the
-- publish's attempt has the row's fencing token and is not one) becomes the status, under
-- the same guard. The row's status after it, and whether this changed it.
WITH e AS MATERIALIZED (
    SELECT x.id, x.plan_time, x.attempt, x.status, x.error_code, x.job_name, x.fencing_token,
           x.runner_id, x.started_at, x.finished_at
    FROM {schema}.cron_executions x
    WHERE x.id = %(id)s
),
last AS MATERIALIZED (
    SELECT a.status, a.error_msg
    FROM e JOIN {schema}.cron_attempts a ON a.execution_id = e.id
    WHERE (e.job_name = 'celery' OR starts_with(e.job_name, 'celery:'))
      AND (e.status = 'SUCCESS' OR (e.status = 'FAILED' AND e.error_code = 'task_failed'))
      AND a.fencing_token <> e.fencing_token
      AND (a.status = 'SUCCESS' OR a.error_code = 'task_failed')
    ORDER BY a.attempt DESC
    LIMIT 1
),
settles AS MATERIALIZED (
    SELECT e.*, last.status AS outcome, last.error_msg FROM e, last
    WHERE (e.status = 'SUCCESS' AND last.status = 'FAILED')
       OR (e.status = 'FAILED' AND e.error_code = 'task_failed')
),
sent AS (
    INSERT INTO {schema}.cron_attempts
        (execution_id, fencing_token, attempt, runner_id, started_at, finished_at, status,
         plan_time)
    SELECT s.id, s.fencing_token, s.attempt, s.runner_id, s.started_at, s.finished_at,
           'SUCCESS', s.plan_time
    FROM settles s WHERE s.status = 'SUCCESS'
    ON CONFLICT DO NOTHING
),
settled AS (
    UPDATE {schema}.cron_executions x
    SET status = s.outcome,
        error_code = CASE WHEN s.outcome = 'FAILED' THEN 'task_failed' END,
        error_msg = CASE WHEN s.outcome = 'FAILED' THEN s.error_msg END,
        next_retry_at = NULL, updated_at = clock_timestamp()
    FROM settles s
    WHERE x.id = s.id AND x.plan_time = s.plan_time
      AND ((x.status = 'SUCCESS' AND s.outcome = 'FAILED')
           OR (x.status = 'FAILED' AND x.error_code = 'task_failed'))
    RETURNING x.status
)
SELECT coalesce((SELECT status FROM settled), e.status) AS execution_status,
       EXISTS (SELECT 1 FROM settled) AS changed
FROM e

-- name: previous_task :opt
-- overlap="forbid" of a Celery entry: the scope's newest plan before this one whose task was
-- sent (its row SUCCESS by the publish, or FAILED by the worker's run), whether a consumer's
-- final outcome of it is kept (a 'task_retried' run is not one), and the seconds left of the
-- `lost_after` its task may take from its publish (negative: past it, counted as lost). Read
-- newest plan first through the plan key.
SELECT p.id,
       EXISTS (SELECT 1 FROM {schema}.cron_attempts a
               WHERE a.execution_id = p.id AND a.fencing_token <> p.fencing_token
                 AND (a.status = 'SUCCESS' OR a.error_code = 'task_failed')) AS outcome,
       extract(epoch FROM p.finished_at + make_interval(secs => %(lost_after)s)
                          - clock_timestamp())::float8 AS left_s
FROM {schema}.cron_executions p
WHERE p.job_name = %(job)s AND p.scope_kind = %(kind)s AND p.scope_id = %(scope_id)s
  AND p.plan_time < %(plan)s
  AND (p.status = 'SUCCESS' OR (p.status = 'FAILED' AND p.error_code = 'task_failed'))
ORDER BY p.plan_time DESC
LIMIT 1

-- name: failed_attempts :many
-- The newest failed attempts across jobs (the status page's recent failures), those of
-- executions that later succeeded included; a FAILED row with no kept attempt (written before
-- version 8, by an older replica, or put back after a failover that lost its attempt) counts
-- as its own. Such rows are looked for among each registered job's newest `limit` FAILED rows
-- only (read through its failed_job index): an older one has `limit` newer entries, so it is
-- never among the newest `limit`, and a long history is never read whole. (A job removed with
-- `forget` has no job_state row: its attempts still show, its rows without one do not.)
SELECT f.* FROM (
    (SELECT a.execution_id, e.job_name AS job, e.scope_kind, e.scope_id, e.plan_time,
            a.attempt, e.max_attempts, a.runner_id, a.finished_at, a.error_code, a.error_msg,
            e.status AS execution_status, e.attempt AS execution_attempt,
            CASE WHEN a.fencing_token = e.fencing_token THEN e.next_retry_at END AS next_retry_at,
            a.fencing_token = e.fencing_token AS latest
     FROM {schema}.cron_attempts a
     JOIN {schema}.cron_executions e ON e.id = a.execution_id
     WHERE a.status IS DISTINCT FROM 'SUCCESS'  -- a consumer's run that succeeded
     ORDER BY a.finished_at DESC
     LIMIT %(limit)s)
    UNION ALL
    (SELECT e.id, e.job_name, e.scope_kind, e.scope_id, e.plan_time, e.attempt, e.max_attempts,
            e.runner_id, e.finished_at, e.error_code, e.error_msg, e.status, e.attempt,
            e.next_retry_at, true
     FROM {schema}.job_state j
     CROSS JOIN LATERAL (
         SELECT x.* FROM {schema}.cron_executions x
         WHERE x.job_name = j.job_name AND x.status = 'FAILED' AND x.finished_at IS NOT NULL
         ORDER BY x.finished_at DESC
         LIMIT %(limit)s) AS e
     WHERE NOT EXISTS (SELECT 1 FROM {schema}.cron_attempts a
                       WHERE a.execution_id = e.id AND a.fencing_token = e.fencing_token)
     ORDER BY e.finished_at DESC
     LIMIT %(limit)s)
) AS f
ORDER BY f.finished_at DESC, f.execution_id, f.attempt
LIMIT %(limit)s

-- name: old_partitions :many
-- Retention: the partitions whose every plan is older than the cutoff, oldest first.
SELECT name FROM {schema}.cron_partitions
WHERE hi <= clock_timestamp() - %(older_than)s
ORDER BY lo

-- name: drop_partition :one
SELECT {schema}.cron_drop_partition(%(name)s) AS dropped

-- name: partition_figures :many
-- The ledger's partitions holding the plans from first_plan to last_plan, and whether the
-- planner has figures for their rows. A partition made ahead is empty and never analyzed; on
-- its first day its first claims plan each one's check for a RUNNING row of the scope with
-- those of an empty table, and an estimate of one row for every index makes the index of
-- (job, plan time) look as cheap as the one of RUNNING rows by scope: each check then read
-- every row of the job in the partition, until autovacuum analyzed it, up to a minute later.
-- `unanalyzed`: rows, and no figures for them, in at most 8 MB: the estimates go wrong only
-- while the partition looks tiny, and a larger one (a restored
-- database's) could keep its ANALYZE from answering within the engine's bound on a statement.
-- `outgrown`: figures taken when it held a quarter of its pages or fewer, in at most 64 MB. A
-- statement planned once per connection (the tick's probe, psycopg's prepared ones) keeps
-- the plan made on those figures until the partition is analyzed again: a probe planned on
-- a few dozen rows read all of the day's rows at every tick until autovacuum came.
-- `rows`: the rows its figures count (as of its last ANALYZE, not its pages now).
SELECT p.name, p.lo, p.hi,
       c.reltuples <= 0 AND pg_relation_size(c.oid) BETWEEN 1 AND 8388608 AS unanalyzed,
       pg_relation_size(c.oid) = 0 AS empty,
       c.reltuples > 0 AND pg_relation_size(c.oid) <= 67108864
         AND pg_relation_size(c.oid) >= 4 * greatest(c.relpages, 1)::bigint
                                          * current_setting('block_size')::bigint AS outgrown,
       greatest(c.reltuples, 0)::bigint AS rows
FROM {schema}.cron_partitions p
JOIN pg_class c ON c.relname = p.name
     AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = %(schema)s)
WHERE p.lo <= %(last_plan)s AND p.hi > %(first_plan)s

-- name: analyze_partition :exec
-- A partition's first figures (see partition_figures), once it holds a claim's rows, and new
-- ones each time it has outgrown them. Only its owner may: for any other role the server
-- skips it with a warning, and autovacuum analyzes it later. SKIP_LOCKED: another replica
-- analyzing it already is enough.
ANALYZE (SKIP_LOCKED) {schema}.{partition}

-- name: ensure_partitions :one
-- Partitions for these plan times, before a backfill or trigger writes them.
SELECT {schema}.cron_ensure_partitions(%(times)s::timestamptz[]) AS made

-- name: partitions_ahead :one
SELECT {schema}.cron_partitions_ahead() AS made

-- name: prune_batch :one
-- Retention in a partition that is not dropped whole ({partition}: the DEFAULT one, which
-- holds the plans of spans with no partition of their own, or the legacy one, the ledger of
-- an earlier version attached whole by migration 14 while it holds plans newer than the
-- cutoff): one batch of finished rows older than the cutoff, deleted, with their attempts. A scope's cursor (or a dynamic job's schedule) remembers where the scope is, so
-- its rows may all go; a scope without one keeps its newest scheduled row, where it resumes
-- on first sight.
WITH gone AS (
    DELETE FROM {schema}.{partition}
    WHERE id IN (
        SELECT e.id FROM {schema}.{partition} e
        WHERE e.finished_at < clock_timestamp() - %(older_than)s
          AND e.status IN ('SUCCESS', 'FAILED', 'CANCELLED')
          AND (e.status <> 'FAILED' OR e.next_retry_at IS NULL)
          AND (EXISTS (
                    SELECT 1 FROM {schema}.cron_cursors c
                    WHERE c.job_name = e.job_name AND c.scope_kind = e.scope_kind
                      AND c.scope_id = e.scope_id)
               OR EXISTS (
                    SELECT 1 FROM {schema}.schedules s
                    WHERE s.job_name = e.job_name AND s.scope_kind = e.scope_kind
                      AND s.scope_id = e.scope_id)
               OR EXISTS (
                    SELECT 1 FROM {schema}.cron_executions n
                    WHERE n.job_name = e.job_name AND n.scope_kind = e.scope_kind
                      AND n.scope_id = e.scope_id AND n.trigger = 'schedule'
                      AND n.plan_time > e.plan_time))
        LIMIT %(batch)s
        FOR UPDATE SKIP LOCKED)
    RETURNING id
),
attempts AS (
    DELETE FROM {schema}.cron_attempts a WHERE a.execution_id IN (SELECT id FROM gone)
)
SELECT count(*) AS deleted FROM gone

-- name: has_legacy_partition :one
SELECT EXISTS (SELECT 1 FROM {schema}.cron_partitions
               WHERE name = 'cron_executions_legacy') AS present

-- name: notify :exec
SELECT pg_notify(%(channel)s, %(payload)s)

-- name: server_state :one
-- Whether this server takes writes (a standby is in recovery, and a primary being switched
-- over is typically made read-only first), and which server it is: its system identifier
-- (shared with the standbys cloned from it) and, on a primary, its timeline (raised by every
-- promotion), read from the name of its current WAL file as Patroni does.
SELECT pg_is_in_recovery() AS in_recovery,
       current_setting('transaction_read_only')::boolean AS read_only,
       (SELECT system_identifier FROM pg_control_system())::text AS system_identifier,
       CASE WHEN NOT pg_is_in_recovery()
            THEN ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int
       END AS timeline

-- name: configure_session :exec
-- Applied to every pgsched connection: a stuck statement or an abandoned transaction cannot
-- hold row locks for ever. Behind a transaction-pooling PgBouncer only inside a transaction
-- (local), since a server connection's session is shared. Three settings only for pgsched's
-- own statements, not on a transactional handler's connection (`handler`), whose statements
-- keep the server's: no JIT compilation (pgsched's statements each read few rows, but over a
-- partitioned ledger with a long history they are estimated costly enough to be compiled,
-- which took far longer than the statements themselves; see no_jit, its form for a pooled
-- connection); timestamps in UTC (psycopg then returns them with datetime.UTC rather than the
-- server's named zone: cheaper to load, convert and compare, which a replica does for every
-- run it claims; no statement depends on the session's zone); and random_page_cost at most 1.1, as in claim transactions (claim_begin):
-- pgsched's statements find rows by key in pages read moments ago, and at the default 4 a
-- batch of terminal writes hashed the whole partition (a sequential scan) rather than probe
-- its id index once a row.
SELECT set_config('statement_timeout', %(statement_ms)s, %(local)s),
       set_config('idle_in_transaction_session_timeout', %(idle_ms)s, %(local)s),
       set_config('jit', CASE WHEN %(handler)s THEN current_setting('jit') ELSE 'off' END,
                  %(local)s),
       set_config('TimeZone',
                  CASE WHEN %(handler)s THEN current_setting('TimeZone') ELSE 'UTC' END,
                  %(local)s),
       set_config('random_page_cost',
                  CASE WHEN %(handler)s THEN current_setting('random_page_cost')
                       ELSE least(current_setting('random_page_cost')::float8, 1.1)::text END,
                  %(local)s)

-- name: put_schedules :exec
-- Schedules as data: create or replace many schedules of one job in one statement. A row
-- identical to the stored one is not written (nor counted in the command's row count). `next_plan_time` is the
-- caller's (the first plan after the put) only when the spec changed (every, cron, zone,
-- calendar, on_excluded), or,
-- when only the window changed and the stored one falls outside it, else the earlier of the
-- two; otherwise the stored plan times stay as they are. The upsert locks the row, so it waits for a claim that
-- holds it and then applies to the row as that claim left it.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
INSERT INTO {schema}.schedules AS s
    (job_name, scope_kind, scope_id, every_us, cron, timezone, calendar, on_excluded, payload,
     starts_at, ends_at, paused, next_plan_time, created_at, updated_at, paused_at)
SELECT %(job)s, v.kind, v.id, v.every_us, v.cron, v.tz, v.calendar, v.on_excluded,
       v.payload::jsonb, v.starts_at, v.ends_at, v.paused, v.next_plan, now.t, now.t,
       CASE WHEN v.paused THEN now.t END
FROM unnest(%(kinds)b::text[], %(ids)b::text[], %(every_us)b::bigint[], %(crons)b::text[],
            %(tzs)b::text[], %(calendars)b::text[], %(on_excluded)b::text[],
            %(payloads)b::text[], %(starts)b::timestamptz[], %(ends)b::timestamptz[],
            %(paused)b::boolean[], %(nexts)b::timestamptz[])
     AS v(kind, id, every_us, cron, tz, calendar, on_excluded, payload, starts_at, ends_at,
          paused, next_plan),
     now
ORDER BY v.kind, v.id
ON CONFLICT (job_name, scope_kind, scope_id) DO UPDATE
SET every_us = EXCLUDED.every_us, cron = EXCLUDED.cron, timezone = EXCLUDED.timezone,
    calendar = EXCLUDED.calendar, on_excluded = EXCLUDED.on_excluded, payload = EXCLUDED.payload, starts_at = EXCLUDED.starts_at, ends_at = EXCLUDED.ends_at,
    paused = EXCLUDED.paused, updated_at = EXCLUDED.updated_at,
    -- as set_schedule_paused: when a pause began and when a resume ended it
    paused_at = CASE WHEN EXCLUDED.paused AND NOT s.paused THEN EXCLUDED.updated_at
                     ELSE s.paused_at END,
    resumed_at = CASE WHEN EXCLUDED.paused AND NOT s.paused THEN NULL
                      WHEN NOT EXCLUDED.paused AND s.paused THEN EXCLUDED.updated_at
                      ELSE s.resumed_at END,
    next_plan_time = CASE
        WHEN (s.every_us, s.cron, s.timezone, s.calendar, s.on_excluded)
             IS DISTINCT FROM (EXCLUDED.every_us, EXCLUDED.cron, EXCLUDED.timezone,
                               EXCLUDED.calendar, EXCLUDED.on_excluded)
            THEN EXCLUDED.next_plan_time
        -- Only the window changed: the stored next plan stays unless the new window excludes
        -- it (or none was left); a window that starts earlier can bring it forward.
        WHEN (s.starts_at, s.ends_at) IS DISTINCT FROM (EXCLUDED.starts_at, EXCLUDED.ends_at)
            THEN CASE WHEN s.next_plan_time IS NULL
                        OR s.next_plan_time < EXCLUDED.starts_at
                        OR s.next_plan_time >= EXCLUDED.ends_at
                      THEN EXCLUDED.next_plan_time
                      ELSE least(s.next_plan_time, EXCLUDED.next_plan_time) END
        ELSE s.next_plan_time END
WHERE (s.every_us, s.cron, s.timezone, s.calendar, s.on_excluded, s.payload, s.starts_at,
       s.ends_at, s.paused)
      IS DISTINCT FROM (EXCLUDED.every_us, EXCLUDED.cron, EXCLUDED.timezone, EXCLUDED.calendar,
                        EXCLUDED.on_excluded, EXCLUDED.payload, EXCLUDED.starts_at,
                        EXCLUDED.ends_at, EXCLUDED.paused)

-- name: get_schedule :opt
SELECT job_name, scope_kind, scope_id, every_us, cron, timezone, calendar, on_excluded,
       payload, starts_at, ends_at, paused, next_plan_time, created_at, updated_at
FROM {schema}.schedules
WHERE job_name = %(job)s AND scope_kind = %(kind)s AND scope_id = %(id)s

-- name: list_schedules :many
-- Keyset pages in (scope_kind, scope_id) order, starting after the given scope.
SELECT job_name, scope_kind, scope_id, every_us, cron, timezone, calendar, on_excluded,
       payload, starts_at, ends_at, paused, next_plan_time, created_at, updated_at
FROM {schema}.schedules
WHERE job_name = %(job)s
  AND (%(kind)s::text IS NULL OR (scope_kind, scope_id) > (%(kind)s::text, %(id)s::text))
ORDER BY scope_kind, scope_id
LIMIT %(limit)s

-- name: delete_schedule :opt
DELETE FROM {schema}.schedules
WHERE job_name = %(job)s AND scope_kind = %(kind)s AND scope_id = %(id)s
RETURNING scope_id

-- name: set_schedule_paused :opt
-- A pause records when it began (a repeated pause keeps it), a resume when it ended: the
-- first claim after the resume skips the plans due in between (`paused`).
UPDATE {schema}.schedules
SET paused = %(paused)s, updated_at = clock_timestamp(),
    paused_at = CASE WHEN %(paused)s AND NOT paused THEN clock_timestamp() ELSE paused_at END,
    resumed_at = CASE WHEN %(paused)s AND NOT paused THEN NULL
                      WHEN NOT %(paused)s AND paused THEN clock_timestamp()
                      ELSE resumed_at END
WHERE job_name = %(job)s AND scope_kind = %(kind)s AND scope_id = %(id)s
RETURNING scope_id

-- name: due_schedules :many
-- The claim of a dynamic job, first half: the schedules whose next plan is due, oldest first,
-- locked for this claim transaction (SKIP LOCKED: concurrent replicas take different ones; a
-- put, pause or delete of a locked schedule waits for the claim to commit). Under
-- overlap="forbid" a schedule whose scope has a RUNNING execution waits; its row lock keeps
-- the scope's other claims out, as a cursor's does (see due_cursors).
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
due AS MATERIALIZED (
    SELECT s.scope_kind, s.scope_id, s.every_us, s.cron, s.timezone, s.starts_at, s.ends_at,
           s.next_plan_time, (SELECT t FROM now) AS now, s.ctid::text AS tid,
           s.paused_at AS own_paused_at, s.resumed_at AS own_resumed_at, s.calendar,
           s.on_excluded, s.created_at
    FROM {schema}.schedules s
    WHERE s.job_name = %(job)s AND NOT s.paused AND s.next_plan_time IS NOT NULL
      AND s.next_plan_time <= (SELECT t FROM now) - %(delay)s
      AND (NOT %(forbid)s OR (
            (SELECT t FROM now) < coalesce(%(running_before)s::timestamptz, 'infinity')
            AND NOT EXISTS (
                SELECT 1 FROM {schema}.cron_executions r
                WHERE r.job_name = (SELECT %(job)s::text) AND r.scope_kind = s.scope_kind
                  AND r.scope_id = s.scope_id AND r.status = 'RUNNING'
                  AND r.plan_time < coalesce(%(running_before)s::timestamptz, 'infinity')
                  AND (r.exclusive OR r.stale_after >= (SELECT t FROM now)))))
    ORDER BY s.next_plan_time
    LIMIT %(limit)s
    FOR UPDATE OF s SKIP LOCKED
)
SELECT due.scope_kind, due.scope_id, due.every_us, due.cron, due.timezone, due.starts_at,
       due.ends_at, due.next_plan_time, due.now, due.tid,
       -- the job's last pause and resume (one probe of job_state), then the schedule's own
       (SELECT j.paused_at FROM {schema}.job_state j WHERE j.job_name = %(job)s) AS paused_at,
       (SELECT j.resumed_at FROM {schema}.job_state j WHERE j.job_name = %(job)s) AS resumed_at,
       due.own_paused_at, due.own_resumed_at, due.calendar, due.on_excluded, due.created_at
FROM due ORDER BY due.next_plan_time

-- name: claim_schedules :many
-- The claim of a dynamic job, second half: RUNNING rows for the chosen plans (with the
-- schedule's payload as of now), and each schedule's next plan moved on. A schedule whose
-- insert met another row is moved on only when that row is the same plan (a backfill or
-- trigger had it); one that met a concurrent claim's exclusive row stays due. Each schedule
-- is read and moved where due_schedules read it, as in claim_cursors; `unmoved` counts the
-- schedules not found there (a plan of one is not inserted: it is left out of `lacking`'s
-- count, which is of the schedules found that stay due).
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
p AS MATERIALIZED (
    SELECT * FROM unnest(%(kinds)b::text[], %(ids)b::text[], %(plans)b::timestamptz[],
                         %(nexts)b::timestamptz[], %(tids)b::text[]::tid[])
             AS p(kind, id, plan_time, next_plan, tid)
),
ins AS (
    INSERT INTO {schema}.cron_executions AS x
        (job_name, scope_kind, scope_id, plan_time, trigger, status, attempt, max_attempts,
         exclusive, runner_id, heartbeat_at, stale_after, started_at, created_at, updated_at,
         payload)
    SELECT %(job)s, p.kind, p.id, p.plan_time, 'schedule', 'RUNNING', 1, %(max_attempts)s,
           %(forbid)s, %(runner)s, now.t, now.t + %(stale_timeout)s, now.t, now.t, now.t, s.payload
    FROM p
    JOIN {schema}.schedules s
      ON s.ctid = p.tid AND s.job_name = %(job)s AND s.scope_kind = p.kind AND s.scope_id = p.id
    CROSS JOIN now
    WHERE p.plan_time IS NOT NULL
      -- overlap="forbid": as in claim_cursors
      AND (NOT %(forbid)s OR (
            now.t < coalesce(%(running_before)s::timestamptz, 'infinity') AND NOT EXISTS (
                SELECT 1 FROM {schema}.cron_executions r
                WHERE r.job_name = (SELECT %(job)s::text) AND r.scope_kind = p.kind AND r.scope_id = p.id
                  AND r.status = 'RUNNING'
                  AND r.plan_time < coalesce(%(running_before)s::timestamptz, 'infinity')
                  AND (r.exclusive OR r.stale_after >= now.t))))
    ORDER BY p.kind, p.id, p.plan_time
    ON CONFLICT DO NOTHING
    RETURNING x.id, x.scope_kind, x.scope_id, x.plan_time, x.lease_token, x.fencing_token,
              x.started_at, x.payload
),
-- The schedules whose plan has no row: not taken by this insert, and not there already (a
-- backfill or trigger had it). As in claim_cursors, only the plans this insert did not take
-- are looked up, one probe of the plan key each (an EXISTS over the ledger beside the others
-- was planned as a hash of the job's whole ledger, built whenever one insert met another row).
untaken AS MATERIALIZED (
    SELECT p.kind, p.id, p.plan_time FROM p
    LEFT JOIN ins i ON i.scope_kind = p.kind AND i.scope_id = p.id AND i.plan_time = p.plan_time
    WHERE p.plan_time IS NOT NULL AND i.scope_id IS NULL
),
lacking AS MATERIALIZED (
    SELECT u.kind, u.id FROM untaken u
    WHERE (SELECT true FROM {schema}.cron_executions e
           WHERE e.job_name = (SELECT %(job)s::text) AND e.scope_kind = u.kind AND e.scope_id = u.id
             AND e.plan_time = u.plan_time
             -- the claim's first and last plans: the planner leaves out the other partitions
             AND e.plan_time BETWEEN %(first_plan)s AND %(last_plan)s
           LIMIT 1) IS NULL
),
moved AS (
    UPDATE {schema}.schedules s
    SET next_plan_time = p.next_plan,
        last_plan_time = CASE WHEN p.plan_time IS NULL THEN s.last_plan_time
                              ELSE greatest(s.last_plan_time, p.plan_time) END
    FROM p
    WHERE s.ctid = p.tid
      AND s.job_name = %(job)s AND s.scope_kind = p.kind AND s.scope_id = p.id
      AND NOT EXISTS (SELECT 1 FROM lacking x WHERE x.kind = p.kind AND x.id = p.id)
    RETURNING s.scope_kind
)
SELECT ins.id, ins.scope_kind, ins.scope_id, ins.plan_time, ins.lease_token, ins.fencing_token,
       ins.started_at, ins.payload,
       (SELECT count(*) FROM p) - (SELECT count(*) FROM moved) - (
           SELECT count(*) FROM lacking x
           JOIN p ON p.kind = x.kind AND p.id = x.id
           JOIN {schema}.schedules s
             ON s.ctid = p.tid AND s.job_name = %(job)s AND s.scope_kind = p.kind
            AND s.scope_id = p.id) AS unmoved
FROM (SELECT 1) AS one
LEFT JOIN ins ON true


-- name: dash_recent_plans :many
-- The dashboard: a job's latest distinct plan times before `before`, newest first, one index
-- probe per plan (a loose index scan on (job_name, plan_time)), however many scopes each has.
-- Plans still ahead (one-offs triggered for later) are the page's pending runs, not columns.
WITH RECURSIVE plans(p, n) AS (
    (SELECT e.plan_time, 1 FROM {schema}.cron_executions e
     WHERE e.job_name = %(job)s
       AND e.plan_time < least(%(before)s, statement_timestamp() + interval '1 second')
     ORDER BY e.plan_time DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT e.plan_time FROM {schema}.cron_executions e
            WHERE e.job_name = %(job)s AND e.plan_time < plans.p
            ORDER BY e.plan_time DESC LIMIT 1), plans.n + 1
    FROM plans WHERE plans.p IS NOT NULL AND plans.n < %(limit)s
)
SELECT p AS plan_time FROM plans WHERE p IS NOT NULL ORDER BY p DESC

-- name: dash_plan_summaries :many
-- Per plan of a job: how its executions stand and their start lag and duration, read from at
-- most `sample` rows of each plan (a 100,000-scope fan-out is sampled, not counted whole).
-- The start lag is that of a scheduled plan's first attempt (a retry, an operator's "retry
-- now" among them, starts when it is told to, not late); a manual run has none. An execution
-- past its first attempt finds it in cron_attempts by its primary key's prefix.
SELECT p.plan_time, s.total, s.success, s.failed, s.running, s.stale, s.pending, s.cancelled,
       s.lag_p50_ms, s.lag_max_ms, s.duration_p50_ms, s.duration_max_ms
FROM unnest(%(plans)s::timestamptz[]) AS p(plan_time)
CROSS JOIN LATERAL (
    SELECT count(*) AS total,
           count(*) FILTER (WHERE x.status = 'SUCCESS') AS success,
           count(*) FILTER (WHERE x.status = 'FAILED') AS failed,
           count(*) FILTER (WHERE x.status = 'RUNNING' AND x.stale_after >= clock_timestamp())
               AS running,
           count(*) FILTER (WHERE x.status = 'RUNNING' AND x.stale_after < clock_timestamp())
               AS stale,
           count(*) FILTER (WHERE x.status = 'PENDING') AS pending,
           count(*) FILTER (WHERE x.status = 'CANCELLED') AS cancelled,
           percentile_disc(0.5) WITHIN GROUP (ORDER BY x.lag_ms) AS lag_p50_ms,
           max(x.lag_ms) AS lag_max_ms,
           percentile_disc(0.5) WITHIN GROUP (ORDER BY x.duration_ms) AS duration_p50_ms,
           max(x.duration_ms) AS duration_max_ms
    FROM (SELECT e.status, e.stale_after, e.duration_ms,
                 (extract(epoch FROM (
                     CASE WHEN e.trigger <> 'schedule' THEN NULL
                          WHEN e.attempt <= 1 THEN e.started_at
                          ELSE (SELECT min(a.started_at) FROM {schema}.cron_attempts a
                                WHERE a.execution_id = e.id AND a.attempt = 1)
                     END) - e.plan_time) * 1000)::bigint AS lag_ms
          FROM {schema}.cron_executions e
          WHERE e.job_name = %(job)s AND e.plan_time = p.plan_time
          LIMIT %(sample)s) AS x
) AS s
ORDER BY p.plan_time DESC

-- name: dash_scope_kinds :many
-- The scope kinds a job's ledger (or its schedules) holds: a loose index scan, at most 50.
WITH RECURSIVE kinds(k, n) AS (
    (SELECT e.scope_kind, 1 FROM {schema}.cron_executions e
     WHERE e.job_name = %(job)s ORDER BY e.scope_kind LIMIT 1)
    UNION ALL
    SELECT (SELECT e.scope_kind FROM {schema}.cron_executions e
            WHERE e.job_name = %(job)s AND e.scope_kind > kinds.k
            ORDER BY e.scope_kind LIMIT 1), kinds.n + 1
    FROM kinds WHERE kinds.k IS NOT NULL AND kinds.n < 50
)
SELECT k AS kind FROM kinds WHERE k IS NOT NULL

-- name: dash_ledger_scopes :many
-- A page of the distinct scopes of one kind in a job's ledger, in id order after `after`,
-- whose id starts with `prefix`: one probe of the plan key's index per scope. Ids that start
-- with the prefix sort together from it, so the walk ends at the first that does not.
WITH RECURSIVE s(id, n) AS (
    (SELECT e.scope_id, 1 FROM {schema}.cron_executions e
     WHERE e.job_name = %(job)s AND e.scope_kind = %(kind)s AND e.scope_id > %(after)s
       AND e.scope_id >= %(prefix)s
     ORDER BY e.scope_id LIMIT 1)
    UNION ALL
    SELECT (SELECT e.scope_id FROM {schema}.cron_executions e
            WHERE e.job_name = %(job)s AND e.scope_kind = %(kind)s AND e.scope_id > s.id
            ORDER BY e.scope_id LIMIT 1), s.n + 1
    FROM s WHERE s.id IS NOT NULL AND s.n < %(limit)s AND starts_with(s.id, %(prefix)s)
)
SELECT %(kind)s::text AS kind, id FROM s
WHERE id IS NOT NULL AND starts_with(id, %(prefix)s)
ORDER BY id

-- name: dash_schedule_kinds :many
SELECT DISTINCT k.kind FROM (
    WITH RECURSIVE kinds(k, n) AS (
        (SELECT s.scope_kind, 1 FROM {schema}.schedules s
         WHERE s.job_name = %(job)s ORDER BY s.scope_kind LIMIT 1)
        UNION ALL
        SELECT (SELECT s.scope_kind FROM {schema}.schedules s
                WHERE s.job_name = %(job)s AND s.scope_kind > kinds.k
                ORDER BY s.scope_kind LIMIT 1), kinds.n + 1
        FROM kinds WHERE kinds.k IS NOT NULL AND kinds.n < 50
    )
    SELECT k AS kind FROM kinds WHERE k IS NOT NULL
) AS k ORDER BY k.kind

-- name: dash_schedules :many
-- A page of one kind of a dynamic job's schedules in id order after `after`, whose id starts
-- with `prefix` (they sort together from it: the page is read from the primary key).
SELECT t.* FROM (
    SELECT job_name, scope_kind, scope_id, every_us, cron, timezone, calendar, on_excluded,
           payload, starts_at, ends_at, paused, next_plan_time, created_at, updated_at
    FROM {schema}.schedules
    WHERE job_name = %(job)s AND scope_kind = %(kind)s AND scope_id > %(after)s
      AND scope_id >= %(prefix)s
    ORDER BY scope_id
    LIMIT %(limit)s
) AS t
WHERE starts_with(t.scope_id, %(prefix)s)
ORDER BY t.scope_id

-- name: dash_cells :many
-- The executions of the given scopes at the given plans: one probe of the plan key per cell.
SELECT e.id, e.job_name AS job, e.scope_kind, e.scope_id, e.plan_time, e.trigger, e.status,
       e.attempt, e.max_attempts, e.next_retry_at, e.runner_id, e.fencing_token,
       e.heartbeat_at, e.stale_after, e.started_at, e.finished_at, e.duration_ms,
       e.rows_affected, e.result, e.payload, e.error_code, e.error_msg, e.created_at,
       (e.status = 'RUNNING' AND e.stale_after < clock_timestamp()) AS stale
FROM unnest(%(kinds)s::text[], %(ids)s::text[]) AS sc(kind, id)
CROSS JOIN unnest(%(plans)s::timestamptz[]) AS p(plan_time)
JOIN {schema}.cron_executions e
  ON e.job_name = (SELECT %(job)s::text) AND e.scope_kind = sc.kind AND e.scope_id = sc.id
 AND e.plan_time = p.plan_time

-- name: dash_scope_runs :many
-- The latest `per_scope` executions of each given scope (a schedule's recent runs).
SELECT r.* FROM unnest(%(kinds)s::text[], %(ids)s::text[]) AS sc(kind, id)
CROSS JOIN LATERAL (
    SELECT e.id, e.job_name AS job, e.scope_kind, e.scope_id, e.plan_time, e.trigger,
           e.status, e.attempt, e.max_attempts, e.next_retry_at, e.runner_id, e.fencing_token,
           e.heartbeat_at, e.stale_after, e.started_at, e.finished_at, e.duration_ms,
           e.rows_affected, e.result, e.payload, e.error_code, e.error_msg, e.created_at,
           (e.status = 'RUNNING' AND e.stale_after < clock_timestamp()) AS stale
    FROM {schema}.cron_executions e
    WHERE e.job_name = (SELECT %(job)s::text) AND e.scope_kind = sc.kind AND e.scope_id = sc.id
    ORDER BY e.plan_time DESC
    LIMIT %(per_scope)s
) AS r

-- name: dash_job_failures :many
-- A job's latest FAILED executions (migration 0011's index), newest first.
SELECT e.id, e.job_name AS job, e.scope_kind, e.scope_id, e.plan_time, e.trigger, e.status,
       e.attempt, e.max_attempts, e.next_retry_at, e.runner_id, e.fencing_token,
       e.heartbeat_at, e.stale_after, e.started_at, e.finished_at, e.duration_ms,
       e.rows_affected, e.result, e.payload, e.error_code, e.error_msg, e.created_at,
       false AS stale
FROM {schema}.cron_executions e
WHERE e.job_name = %(job)s AND e.status = 'FAILED'
ORDER BY e.finished_at DESC
LIMIT %(limit)s

-- name: dash_pending :many
-- A job's PENDING executions (triggers, backfills, one-offs ahead), earliest plan first.
SELECT e.id, e.job_name AS job, e.scope_kind, e.scope_id, e.plan_time, e.trigger, e.status,
       e.attempt, e.max_attempts, e.next_retry_at, e.runner_id, e.fencing_token,
       e.heartbeat_at, e.stale_after, e.started_at, e.finished_at, e.duration_ms,
       e.rows_affected, e.result, e.payload, e.error_code, e.error_msg, e.created_at,
       false AS stale
FROM {schema}.cron_executions e
WHERE e.job_name = %(job)s AND e.status = 'PENDING'
ORDER BY e.plan_time
LIMIT %(limit)s

-- name: dash_upcoming :many
-- A job's next plans: a dynamic job's earliest due schedules, else the plans its replicas
-- registered that are still ahead.
SELECT u.plan_time, u.scope_kind, u.scope_id FROM (
    SELECT s.next_plan_time AS plan_time, s.scope_kind, s.scope_id
    FROM {schema}.schedules s
    WHERE s.job_name = %(job)s AND NOT s.paused AND s.next_plan_time IS NOT NULL
    ORDER BY s.next_plan_time
    LIMIT %(limit)s
) AS u
UNION ALL
SELECT v.p, NULL, NULL
FROM {schema}.job_state j, unnest(j.upcoming) AS v(p)
WHERE j.job_name = %(job)s AND j.schedule IS DISTINCT FROM 'dynamic'
  AND v.p > clock_timestamp()
ORDER BY 1
LIMIT %(limit)s

-- name: retry_now :opt
-- A FAILED execution becomes due for a retry now, given one more attempt when it had none
-- left (a row once stolen after a crash has one past max_attempts: see claim_existing); the
-- replicas' claims take it over as any due retry.
UPDATE {schema}.cron_executions
SET next_retry_at = clock_timestamp(),
    max_attempts = greatest(max_attempts, attempt + 1 - CASE WHEN stolen THEN 1 ELSE 0 END),
    updated_at = clock_timestamp()
WHERE id = %(id)s AND status = 'FAILED'
RETURNING id, job_name

-- name: record_action :exec
-- One operator action, at the database's clock. An action on an execution (cancel, retry)
-- that names no job is filed under the execution's job, so the job's page shows it.
INSERT INTO {schema}.actions
    (surface, actor, action, job_name, scope, execution_id, target, details, outcome, detail)
VALUES (%(surface)s, %(actor)s, %(action)s,
        coalesce(%(job)s, (SELECT e.job_name FROM {schema}.cron_executions e
                           WHERE %(execution_id)s::uuid IS NOT NULL
                             AND e.id = %(execution_id)s::uuid LIMIT 1)),
        %(scope)s, %(execution_id)s, coalesce(%(scope)s, %(execution_id)s::text),
        %(details)s::jsonb, %(outcome)s, left(%(detail)s, 4000))

-- name: list_actions :many
-- The latest recorded actions, of one job or of all.
SELECT id, at, surface, actor, action, job_name AS job, scope, execution_id, target, details,
       outcome, detail
FROM {schema}.actions
ORDER BY at DESC
LIMIT %(limit)s

-- name: list_job_actions :many
SELECT id, at, surface, actor, action, job_name AS job, scope, execution_id, target, details,
       outcome, detail
FROM {schema}.actions
WHERE job_name = %(job)s
ORDER BY at DESC
LIMIT %(limit)s

-- name: dash_job_summary :many
-- The overview's jobs: job_summary's columns, every count stopping at `cap` + 1 rows (the page
-- shows "over cap"), so a job with a million schedules or failures costs what a small one does.
WITH now AS MATERIALIZED (SELECT statement_timestamp() AS t)
SELECT j.job_name AS job, j.paused, j.schedule, j.seen_at, j.seen_by,
       last.plan_time AS last_plan, last.status AS last_status,
       -- the latest successful plan's finish, read newest plan first (job_plan index)
       (SELECT e.finished_at FROM {schema}.cron_executions e
        WHERE e.job_name = j.job_name AND e.status = 'SUCCESS'
        ORDER BY e.plan_time DESC LIMIT 1) AS last_success,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.cron_executions e
        WHERE e.job_name = j.job_name AND e.status = 'RUNNING'
          AND e.stale_after >= (SELECT t FROM now) LIMIT %(cap)s + 1) AS c) AS running,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.cron_executions e
        WHERE e.job_name = j.job_name AND e.status = 'RUNNING'
          AND e.stale_after < (SELECT t FROM now) LIMIT %(cap)s + 1) AS c) AS stale,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.cron_executions e
        WHERE e.job_name = j.job_name AND e.status = 'FAILED'
          AND e.next_retry_at IS NULL LIMIT %(cap)s + 1) AS c) AS failed,
       (SELECT count(*) FROM (SELECT 1 FROM {schema}.cron_executions e
        WHERE e.job_name = j.job_name AND e.status = 'PENDING' LIMIT %(cap)s + 1) AS c) AS pending,
       CASE WHEN j.schedule = 'dynamic' THEN
           (SELECT count(*) FROM (SELECT 1 FROM {schema}.schedules s
            WHERE s.job_name = j.job_name LIMIT %(cap)s + 1) AS c) END AS schedules,
       CASE WHEN j.schedule = 'dynamic' THEN
           (SELECT count(*) FROM (SELECT 1 FROM {schema}.schedules s
            WHERE s.job_name = j.job_name AND s.paused LIMIT %(cap)s + 1) AS c) END
           AS schedules_paused,
       next.due AS next_due,
       CASE WHEN j.schedule = 'dynamic' THEN next.due
            ELSE (SELECT min(u.p) FROM unnest(j.upcoming) AS u(p) WHERE u.p > (SELECT t FROM now))
       END AS next_plan,
       EXISTS (SELECT 1 FROM {schema}.live_replicas p
               WHERE j.job_name = ANY (p.jobs)) AS live
FROM {schema}.job_state j
LEFT JOIN LATERAL (
    SELECT min(n.next_plan_time) AS due FROM {schema}.schedules n
    WHERE n.job_name = j.job_name AND NOT n.paused AND n.next_plan_time IS NOT NULL
      AND j.schedule = 'dynamic'
) AS next ON true
LEFT JOIN LATERAL (
    SELECT e.plan_time, e.status FROM {schema}.cron_executions e
    WHERE e.job_name = j.job_name AND (e.trigger = 'schedule' OR e.started_at IS NOT NULL)
    ORDER BY e.plan_time DESC LIMIT 1
) AS last ON true
ORDER BY j.job_name
LIMIT 1000

-- name: no_jit :exec
-- For the rest of the transaction: the operator's reads (status, the gauges, the dashboard)
-- cost milliseconds, but their subqueries over a partitioned ledger with a long history are
-- estimated high enough to trigger JIT compilation, which alone took far longer than the
-- statement (docs/performance.md, "Measured reasons in the code").
SELECT set_config('jit', 'off', true)

-- name: previous_outcomes :many
-- For the recovery hooks (only run when one is registered): per (job, scope, plan), the
-- status of the scope's latest finished plan before it, newest plan first on the plan key.
SELECT k.i, p.status
FROM unnest(%(jobs)s::text[], %(kinds)s::text[], %(ids)s::text[], %(plans)s::timestamptz[])
     WITH ORDINALITY AS k(job, kind, id, plan, i)
CROSS JOIN LATERAL (
    SELECT e.status FROM {schema}.cron_executions e
    WHERE e.job_name = k.job AND e.scope_kind = k.kind AND e.scope_id = k.id
      AND e.plan_time < k.plan AND e.status IN ('SUCCESS', 'FAILED')
    ORDER BY e.plan_time DESC
    LIMIT 1
) AS p
-- name: explain_job :opt
-- What `explain` reads of a job: its recorded schedule and scopes mode, its pause, the live
-- replicas that register it (live_replicas), and the database's clock.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
SELECT j.schedule, j.scopes, j.paused, j.paused_at, j.resumed_at, (SELECT t FROM now) AS now,
       ARRAY(SELECT p.runner_id FROM {schema}.live_replicas p
             WHERE %(job)s = ANY (p.jobs)
             ORDER BY p.runner_id) AS runners
FROM {schema}.job_state j
WHERE j.job_name = %(job)s

-- name: explain_scope :opt
-- A scope's cursor (first sight, next and last plans), or a dynamic job's schedule.
SELECT c.first_seen_at, c.next_plan_time, c.last_plan_time, c.retired_at,
       NULL::bigint AS every_us, NULL::text AS cron, NULL::text AS timezone,
       NULL::timestamptz AS starts_at, NULL::timestamptz AS ends_at, false AS paused,
       NULL::text AS calendar, 'skip' AS on_excluded
FROM {schema}.cron_cursors c
WHERE c.job_name = %(job)s AND c.scope_kind = %(kind)s AND c.scope_id = %(id)s
UNION ALL
SELECT s.created_at, s.next_plan_time, s.last_plan_time, NULL, s.every_us, s.cron, s.timezone,
       s.starts_at, s.ends_at, s.paused, s.calendar, s.on_excluded
FROM {schema}.schedules s
WHERE s.job_name = %(job)s AND s.scope_kind = %(kind)s AND s.scope_id = %(id)s

-- name: explain_runs :many
-- A scope's rows with plans in [since, until], newest first, at most 2,000 (the plan key).
SELECT e.id, e.plan_time, e.trigger, e.status, e.attempt, e.max_attempts, e.runner_id
FROM {schema}.cron_executions e
WHERE e.job_name = %(job)s AND e.scope_kind = %(kind)s AND e.scope_id = %(id)s
  AND e.plan_time BETWEEN %(since)s AND %(until)s
ORDER BY e.plan_time DESC
LIMIT 2000

-- name: explain_spans :many
-- A scope's skipped spans that meet [since, until], newest first, at most 2,000.
SELECT k.reason, k.first_plan, k.last_plan, k.plans
FROM {schema}.cron_skips k
WHERE k.job_name = %(job)s AND k.scope_kind = %(kind)s AND k.scope_id = %(id)s
  AND k.first_plan <= %(until)s AND k.last_plan >= %(since)s
ORDER BY k.first_plan DESC
LIMIT 2000

-- name: explain_plans :many
-- Per plan of a whole job: its rows by status (the job_plan index, one range per plan).
SELECT p.plan_time,
       (SELECT coalesce(jsonb_object_agg(x.status, x.n), '{{}}') FROM (
            SELECT e.status, count(*) AS n FROM {schema}.cron_executions e
            WHERE e.job_name = %(job)s AND e.plan_time = p.plan_time
              -- the plans' span: the planner leaves out the other partitions
              AND e.plan_time BETWEEN %(first)s AND %(last)s
            GROUP BY e.status) x) AS statuses
FROM (SELECT DISTINCT unnest(%(plans)s::timestamptz[]) AS plan_time) p
ORDER BY p.plan_time

-- name: explain_job_spans :many
-- A whole job's spans that meet [first, last] (cron_skips_job_last_idx), those of its scopes
-- that skipped the same plans for the same reason counted as one row.
SELECT k.reason, k.first_plan, k.last_plan, count(*) AS scopes
FROM {schema}.cron_skips k
WHERE k.job_name = %(job)s AND k.last_plan >= %(first)s AND k.first_plan <= %(last)s
GROUP BY k.reason, k.first_plan, k.last_plan

-- name: latest_skips :many
-- A job's spans with the latest last plans (cron_skips_job_last_idx, read backwards).
SELECT k.scope_kind, k.scope_id, k.reason, k.first_plan, k.last_plan, k.plans
FROM {schema}.cron_skips k
WHERE k.job_name = %(job)s
ORDER BY k.last_plan DESC
LIMIT %(limit)s

-- name: grid_skips :many
-- The dashboard grid's cells of skipped plans: for the scopes and plans shown, the reason of
-- the span holding each (the scope's spans up to the newest plan shown, through the key).
SELECT sc.kind AS scope_kind, sc.id AS scope_id, p.plan_time, k.reason
FROM unnest(%(kinds)s::text[], %(ids)s::text[]) AS sc(kind, id)
CROSS JOIN unnest(%(plans)s::timestamptz[]) AS p(plan_time)
JOIN {schema}.cron_skips k
  ON k.job_name = %(job)s AND k.scope_kind = sc.kind AND k.scope_id = sc.id
 AND k.first_plan <= p.plan_time AND k.last_plan >= p.plan_time

-- name: open_session :one
-- A browser signed in to the dashboard (migration 0020): its session id's sha256, the role
-- it grants and its end. The same statement removes the sessions already past their end
-- (SKIP LOCKED: one being removed by another sign-in is left to it).
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
gone AS (
    DELETE FROM {schema}.dashboard_sessions s
    WHERE s.id_hash IN (
        SELECT x.id_hash FROM {schema}.dashboard_sessions x
        WHERE x.expires_at < (SELECT t FROM now)
        ORDER BY x.expires_at
        LIMIT 1000
        FOR UPDATE SKIP LOCKED)
)
INSERT INTO {schema}.dashboard_sessions (id_hash, role, actor, created_at, expires_at)
SELECT %(id_hash)s, %(role)s, %(actor)s, now.t, now.t + %(lifetime)s FROM now
RETURNING expires_at

-- name: find_session :opt
-- The role and actor of a session not yet past its end.
SELECT role, actor, expires_at FROM {schema}.dashboard_sessions
WHERE id_hash = %(id_hash)s AND expires_at >= clock_timestamp()

-- name: close_session :exec
-- Sign-out.
DELETE FROM {schema}.dashboard_sessions WHERE id_hash = %(id_hash)s

-- name: django_beat_tasks :many
-- django-celery-beat's periodic tasks with their schedules (its tables as its migrations make
-- them, found on the source connection's search_path), by name: what
-- `pgsched celery import-django-celery-beat` copies. Read only.
SELECT t.name, t.task, t.args, t.kwargs, t.queue, t.exchange, t.routing_key, t.headers,
       t.priority, t.expires, t.expire_seconds, t.one_off, t.start_time, t.enabled,
       t.description, t.solar_id,
       i.every AS interval_every, i.period AS interval_period,
       c.minute AS cron_minute, c.hour AS cron_hour, c.day_of_month AS cron_day_of_month,
       c.month_of_year AS cron_month_of_year, c.day_of_week AS cron_day_of_week,
       c.timezone AS cron_timezone,
       k.clocked_time
FROM django_celery_beat_periodictask t
LEFT JOIN django_celery_beat_intervalschedule i ON i.id = t.interval_id
LEFT JOIN django_celery_beat_crontabschedule c ON c.id = t.crontab_id
LEFT JOIN django_celery_beat_clockedschedule k ON k.id = t.clocked_id
ORDER BY t.name
