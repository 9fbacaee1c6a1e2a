-- pgsched schema, version 25: one definition of a live replica, for every statement that asks
-- (the replica list, forget, the jobs' live flag, triggers' warnings, explain). A replica is
-- live while its row was renewed within three of its renewal intervals (`live_until`, 0020);
-- a row an earlier version wrote (no live_until, or one older than its seen_at: it renewed
-- without writing it) renews every 10 s, so it is live for 30 s after seen_at. A row past its
-- expiry is never live. Only a view: replicas of earlier versions keep their own statements.
CREATE OR REPLACE VIEW {schema}.live_replicas AS
SELECT p.*
FROM {schema}.replicas p
WHERE CASE WHEN p.live_until >= p.seen_at THEN p.live_until
           ELSE p.seen_at + interval '30 seconds' END >= clock_timestamp()
  AND p.expires_at >= clock_timestamp();
