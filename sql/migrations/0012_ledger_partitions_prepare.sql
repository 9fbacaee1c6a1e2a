-- pgsched schema, version 12: the ledger's partitioning, first of three steps (13 and 14
-- follow, each in its own transaction). Nothing here changes what replicas of version 11 do.
--
-- `cron_partitioning`: how the ledger is cut. `width` is one partition's span of plan_time
-- (a day by default; any interval without months or years, at least an hour: partitions
-- are aligned with date_bin), `ahead` how far past now replicas keep partitions ready.
-- Changing either (UPDATE) applies to the partitions created from then on. `legacy_until`:
-- the end of the first partition, the unpartitioned ledger of an earlier version attached
-- as is (migration 14); rows of plans before it stay there.
CREATE TABLE IF NOT EXISTS {schema}.cron_partitioning (
    singleton     boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    width         interval    NOT NULL DEFAULT '1 day',
    ahead         interval    NOT NULL DEFAULT '7 days',
    legacy_until  timestamptz NOT NULL,
    CHECK (width >= interval '1 hour' AND date_part('month', width) = 0
           AND date_part('year', width) = 0),
    CHECK (ahead >= interval '0')
);
-- The end of today (UTC): replicas of version 11 keep inserting today's plans into the old
-- table until migration 14 commits.
INSERT INTO {schema}.cron_partitioning (legacy_until)
VALUES (date_bin('1 day', clock_timestamp(), timestamptz '2000-01-01 00:00+00') + interval '1 day')
ON CONFLICT DO NOTHING;

-- One row per partition of the ledger (the catalog holds the same, as bound expressions):
-- which span of plan_time it holds. The DEFAULT partition has none.
CREATE TABLE IF NOT EXISTS {schema}.cron_partitions (
    name  text        PRIMARY KEY,
    lo    timestamptz NOT NULL,
    hi    timestamptz NOT NULL,
    CHECK (lo < hi)
);
CREATE INDEX IF NOT EXISTS cron_partitions_lo_idx ON {schema}.cron_partitions (lo);

-- Execution ids ordered by time (UUID version 7: 48 bits of Unix milliseconds, then random
-- bits): a partition's id index is written at its right edge, not all over the tree.
CREATE OR REPLACE FUNCTION {schema}.uuid_v7() RETURNS uuid
LANGUAGE sql VOLATILE AS $$
    SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
        PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint)
                          FROM 3)
        FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;

-- The old table will become the first partition, for plans before legacy_until. A CHECK
-- constraint saying so lets ATTACH skip its scan; added NOT VALID here (a moment's lock),
-- validated by migration 13 under a lock that lets replicas write meanwhile.
DO $$
DECLARE
    ledger regclass := to_regclass((SELECT relnamespace::regnamespace::text
                                    FROM pg_class
                                    WHERE oid = (SELECT tableoid FROM {schema}.cron_partitioning
                                                 LIMIT 1)) || '.cron_executions');
BEGIN
    IF (SELECT relkind FROM pg_class WHERE oid = ledger) = 'r'
       AND NOT EXISTS (SELECT 1 FROM pg_constraint
                       WHERE conrelid = ledger AND conname = 'cron_executions_legacy_bound') THEN
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT cron_executions_legacy_bound'
                       ' CHECK (plan_time < %L) NOT VALID',
                       ledger, (SELECT legacy_until FROM {schema}.cron_partitioning));
    END IF;
END
$$;
