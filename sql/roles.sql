-- Least-privilege roles for pgsched, run once by a database administrator:
--
--   psql "$ADMIN_DSN" -v schema=pgsched -v owner=pgsched_owner -v runtime=pgsched_runtime \
--        -v owner_password="$OWNER_PW" -v runtime_password="$RUNTIME_PW" -f sql/roles.sql
--
-- owner:   owns the schema and runs `pgsched migrate` (DDL). Used by the migration step only (the Deployment's init container).
-- runtime: what every `pgsched run` replica and operator command uses: SELECT, INSERT,
--          UPDATE, DELETE on pgsched's tables and USAGE on its sequence. No DDL, no
--          superuser, nothing outside the schema. Tables added by later migrations (run by
--          the owner) are granted automatically through default privileges.
-- Re-running the file is safe: roles that exist keep their passwords unless given anew.
\set ON_ERROR_STOP on

SELECT format('CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD %L',
              :'owner', :'owner_password')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'owner') \gexec
SELECT format('CREATE ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD %L',
              :'runtime', :'runtime_password')
WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = :'runtime') \gexec

CREATE SCHEMA IF NOT EXISTS :"schema" AUTHORIZATION :"owner";
ALTER SCHEMA :"schema" OWNER TO :"owner";
REVOKE ALL ON SCHEMA :"schema" FROM PUBLIC;
GRANT USAGE ON SCHEMA :"schema" TO :"runtime";

-- Tables and sequences that exist already (when roles are added to a migrated schema) ...
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA :"schema" TO :"runtime";
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA :"schema" TO :"runtime";
-- ... and those the owner's migrations create later.
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA :"schema"
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO :"runtime";
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA :"schema"
    GRANT USAGE, SELECT ON SEQUENCES TO :"runtime";
