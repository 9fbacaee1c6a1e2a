"""A schema as an earlier version of pgsched left it: its migrations applied up to one."""

from __future__ import annotations

import psycopg
from psycopg import sql

from pgsched._storage.statements import migration_files
from tests.support.rows import table


def migrate_to(dsn: str, schema: str, last: str) -> None:
    """The schema as the migrations up to ``last`` left it (an earlier version's `migrate`)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {} (version text PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            ).format(table(schema, "schema_migrations"))
        )
        for version, name, text in migration_files():
            if version > last:
                break
            conn.execute(sql.SQL(text).format(schema=sql.Identifier(schema)))
            conn.execute(
                sql.SQL("INSERT INTO {} VALUES (%s, %s)").format(
                    table(schema, "schema_migrations")
                ),
                (version, name),
            )
