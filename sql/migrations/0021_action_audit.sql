-- pgsched schema, version 21: every operator action in `actions`, whichever surface made it.
-- `surface`: cli, admin, async_admin, http or dashboard (NULL on the rows of earlier
-- versions, which only the HTTP API and the dashboard wrote); the action's scope, execution
-- and details (such as a trigger's `at`) as columns of their own. Nullable columns only, so
-- replicas of earlier versions keep inserting their rows.
ALTER TABLE {schema}.actions
    ADD COLUMN IF NOT EXISTS surface      text,
    ADD COLUMN IF NOT EXISTS scope        text,
    ADD COLUMN IF NOT EXISTS execution_id uuid,
    ADD COLUMN IF NOT EXISTS details      jsonb;
