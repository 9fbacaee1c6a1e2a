-- pgsched schema, version 6: fencing tokens that stay larger across a failover.
-- A failover to an asynchronous standby can lose the last transactions of the old primary,
-- and with them the last values its fencing sequence handed out: the promoted server's
-- sequence resumes lower, and would hand the same tokens out again. Its timeline does not go
-- back: every promotion raises it. A token is therefore the server's timeline in the high
-- bits and the sequence in the low 40 (a trillion claims per timeline), so every token a
-- promoted server hands out is larger than every token of the servers before it. The
-- timeline is read from the name of the server's current WAL file, as Patroni reads it.
CREATE OR REPLACE FUNCTION {schema}.next_fencing_token() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT (('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::bigint << 40)
           + nextval('{schema}.fencing_seq')
$$;
ALTER TABLE {schema}.cron_executions
    ALTER COLUMN fencing_token SET DEFAULT {schema}.next_fencing_token();
