-- pgsched schema, version 16: cursor pages half empty. Every claim updates each claimed
-- scope's cursor, in batches (a page's cursors in one statement); on a full page each new
-- row version goes to another page, and PostgreSQL then writes an extra WAL record locking
-- the old one: about one record per execution of 18 (measured with pg_walinspect, 2,000
-- scopes every 5 s). With room on the page the versions stay on it. The table holds one
-- small row per scope, so doubling its pages costs little. Only the table's storage
-- parameter changes (no rewrite, a brief SHARE UPDATE EXCLUSIVE lock): pages filled from now
-- on keep the room, existing ones as their rows move.
ALTER TABLE {schema}.cron_cursors SET (fillfactor = 50);
