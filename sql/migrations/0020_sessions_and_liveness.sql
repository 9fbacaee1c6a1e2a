-- pgsched schema, version 20: dashboard sessions, and how long a replica's row shows it live.
-- `dashboard_sessions`: one row per browser signed in to the dashboard, shared by every replica and
-- `pgsched web` behind one load balancer. The cookie holds a random id; only its sha256 is
-- stored (a leaked table lets no one in), with the role it grants and when it ends. Rows
-- past `expires_at` are removed by the next sign-in. A new table: replicas of earlier
-- versions, which never read it, keep running (their dashboards keep their own cookie).
CREATE TABLE IF NOT EXISTS {schema}.dashboard_sessions (
    id_hash    bytea       PRIMARY KEY,
    role       text        NOT NULL CHECK (role IN ('operator', 'viewer')),
    actor      text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS dashboard_sessions_expires_idx ON {schema}.dashboard_sessions (expires_at);

-- A replica is shown live only until `live_until` (three of its renewal intervals after its
-- last registration); `expires_at` stays when its row is removed. Replicas of earlier
-- versions, which renew every 10 s, leave it NULL (or older than their seen_at, after a
-- downgrade): readers then take seen_at + 30 s.
ALTER TABLE {schema}.replicas ADD COLUMN IF NOT EXISTS live_until timestamptz;
