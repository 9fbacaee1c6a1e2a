-- pgsched schema, version 15: each live replica's view of each code-defined job's scopes, as
-- a digest of its scope list by job name. A replica retires the cursors of scopes it no
-- longer lists only while every live replica that runs the job lists the same scopes: during
-- a rolling update that changes a job's scopes, replicas of the two versions would otherwise
-- retire each other's scopes each time one starts. Only a new column with a constant
-- default (no rewrite): replicas of earlier versions keep running, and count as disagreeing.
ALTER TABLE {schema}.replicas
    ADD COLUMN IF NOT EXISTS scope_digests jsonb NOT NULL DEFAULT '{{}}';
