"""Creating and upgrading the schema: the migrations of ``sql/migrations/``, each once."""

from __future__ import annotations

import asyncio
import time

import psycopg
from psycopg import sql

from .statements import Conn, Statements, migration_files

# A migration that misses its lock (it set a short lock_timeout) is tried again this often,
# for this long.
MIGRATION_LOCK_RETRY_S = 1.0
MIGRATION_LOCK_PATIENCE_S = 600.0


class SchemaStatements(Statements):
    """Creating and upgrading the schema."""

    async def migrate(self, conn: Conn) -> list[str]:
        """Apply the migrations not yet applied; returns their versions. Safe concurrently.

        Each migration commits on its own, under the migrate lock: a step that scans a large
        table under a weak lock (validating a constraint) is then not held up by, nor holds,
        the strong lock of the next one (partitioning the ledger, migration 0014)."""
        applied_now = []
        for version, name, text in migration_files():
            if await self._apply_patiently(conn, version, name, text):
                applied_now.append(version)
        return applied_now

    async def _apply_patiently(self, conn: Conn, version: str, name: str, text: str) -> bool:
        """Apply one migration; False when it was applied already. A migration that sets a
        short lock_timeout (one taking a strong lock on the ledger) and misses its lock is
        tried again a second later, for up to ten minutes: a lock request left queued
        behind a long transaction would hold up every replica's statements behind it."""
        deadline = time.monotonic() + MIGRATION_LOCK_PATIENCE_S
        while True:
            try:
                return await self._apply(conn, version, name, text)
            except psycopg.errors.LockNotAvailable:
                if time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(MIGRATION_LOCK_RETRY_S)

    async def _apply(self, conn: Conn, version: str, name: str, text: str) -> bool:
        async with conn.transaction():
            await self._exec(conn, "migrate_lock", {"key": f"pgsched.migrate:{self.schema}"})
            quoted = sql.Identifier(self.schema).as_string(conn)
            if not (await self._one(conn, "schema_exists", {"schema": quoted}))["present"]:
                await self._exec(conn, "create_schema")
            await self._exec(conn, "migrate_bootstrap")
            done = {r["version"] for r in await self._many(conn, "applied_migrations")}
            if version in done:
                return False
            body = sql.SQL(text).format(schema=sql.Identifier(self.schema))
            await conn.execute(body)
            await self._exec(conn, "record_migration", {"version": version, "name": name})
            return True

    async def is_migrated(self, conn: Conn) -> bool:
        """True when every migration this version ships has been applied."""
        table = sql.Identifier(self.schema, "schema_migrations").as_string(conn)
        present = await self._one(conn, "has_migrations_table", {"table": table})
        if not present["present"]:
            return False
        done = {r["version"] for r in await self._many(conn, "applied_migrations")}
        return all(version in done for version, _, _ in migration_files())
