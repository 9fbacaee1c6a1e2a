"""The named statements of ``sql/queries.sql`` and how they run.

Each statement's name line says how many rows it gives back (``-- name: now :one``):
``:exec`` (none read; the helper returns the row count), ``:one`` (exactly one), ``:opt``
(zero or one), ``:many`` (any number). ``names.py``, generated from the file, types the name
each helper takes, so a statement run through the helper of another cardinality, or a
misspelt name, fails mypy; tests/unit/test_statements.py checks the parameters each call
passes against the statement's placeholders.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime, timedelta
from functools import cache, lru_cache
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.rows import args_row, class_row, dict_row

from .._records import Row
from .names import Exec, Many, One, Opt
from .sqlfile import Statement, read_statements

_V = TypeVar("_V")
Conn = AsyncConnection[Any]
Params = Mapping[str, Any]

# The claims are planned on every execution, never from a server-side prepared statement: a
# generic plan chosen while the table was small (psycopg prepares a statement on its fifth
# use) stays in the session and can turn a claim's index probes into scans of a table that
# has since grown, seconds per claim.
PLAN_EACH_TIME = False
# A write of this many new cursors or schedules has the table analyzed (analyze_cursors,
# analyze_schedules): claims planned on the figures of before read every row of the job.
ANALYZE_AFTER = 1_000

_MIGRATION = re.compile(r"^(\d{4})_(\w+)\.sql$")


def sql_dir() -> Traversable:
    """The packaged ``sql/`` directory (inside the wheel), or the source checkout's."""
    packaged = resources.files("pgsched").joinpath("sql")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "sql"


@cache
def statements() -> Mapping[str, Statement]:
    """The statements of the packaged ``sql/queries.sql``, read once per process."""
    text = sql_dir().joinpath("queries.sql").read_text(encoding="utf-8")
    return MappingProxyType(read_statements(text))


def migration_files() -> list[tuple[str, str, str]]:
    """``(version, name, text)`` of every migration, in order."""
    out = []
    for entry in sql_dir().joinpath("migrations").iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            out.append((match[1], match[2], entry.read_text(encoding="utf-8")))
    return sorted(out)


@lru_cache(maxsize=32)
def _catalog(schema: str) -> Mapping[str, sql.Composed]:
    """The statements of ``schema`` by name, formatted once per process and schema (of the
    last few schemas used): every store of the schema shares them. A statement over one
    partition (``{partition}``) is formatted per call instead."""
    ident = sql.Identifier(schema)
    return MappingProxyType(
        {
            name: sql.SQL(s.text).format(schema=ident)
            for name, s in statements().items()
            if "{partition}" not in s.text
        }
    )


@lru_cache(maxsize=64)
def _over_partition(schema: str, name: str, partition: str) -> sql.Composed:
    text = statements()[name].text
    return sql.SQL(text).format(schema=sql.Identifier(schema), partition=sql.Identifier(partition))


@contextmanager
def naming(name: str) -> Iterator[None]:
    """A database error inside names the statement ``name`` (describe_error says it): a tick
    runs a dozen, and "canceling statement due to statement timeout" alone does not tell which
    one ran long."""
    try:
        yield
    except psycopg.Error as exc:
        if getattr(exc, "pgsched_statement", None) is None:
            exc.pgsched_statement = name  # type: ignore[attr-defined]
            exc.add_note(f"(pgsched's {name} statement)")
        raise


class Statements:
    """The named statements of one schema, and the one helper per cardinality (and row
    shape) that runs them; each subject's store is made of these."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        # Prefix of the claims' per-scope advisory lock keys (overlap="forbid"): one schema's
        # scopes never hold up another's.
        self.lock_ns = f"pgsched.scope:{schema}\x1f"
        self._q = _catalog(schema)

    def statement(self, name: str, partition: str | None = None) -> sql.Composed:
        """The formatted statement ``name`` (over ``partition``, for those that take one)."""
        if partition is None:
            return self._q[name]
        return _over_partition(self.schema, name, partition)

    async def _exec(
        self, conn: Conn, name: Exec, params: Params | None = None, *, partition: str | None = None
    ) -> int:
        """Run an ``:exec`` statement; returns the rows it touched."""
        async with conn.cursor() as cur:
            await self._execute(cur, name, params, partition=partition)
            return cur.rowcount

    async def _one(
        self,
        conn: Conn,
        name: One,
        params: Params | None = None,
        *,
        prepare: bool | None = None,
        partition: str | None = None,
    ) -> Row:
        async with conn.cursor(row_factory=dict_row) as cur:
            await self._execute(cur, name, params, prepare=prepare, partition=partition)
            (row,) = await cur.fetchall()
            return row

    async def _opt(self, conn: Conn, name: Opt, params: Params | None = None) -> Row | None:
        async with conn.cursor(row_factory=dict_row) as cur:
            await self._execute(cur, name, params)
            return await cur.fetchone()

    async def _many(
        self, conn: Conn, name: Many, params: Params | None = None, *, prepare: bool | None = None
    ) -> list[Row]:
        async with conn.cursor(row_factory=dict_row) as cur:
            await self._execute(cur, name, params, prepare=prepare)
            return await cur.fetchall()

    async def _one_as(self, conn: Conn, name: One, cls: type[_V], params: Params) -> _V:
        async with conn.cursor(row_factory=class_row(cls)) as cur:
            await self._execute(cur, name, params)
            (row,) = await cur.fetchall()
            return row

    async def _opt_as(self, conn: Conn, name: Opt, cls: type[_V], params: Params) -> _V | None:
        async with conn.cursor(row_factory=class_row(cls)) as cur:
            await self._execute(cur, name, params)
            return await cur.fetchone()

    async def _many_as(
        self,
        conn: Conn,
        name: Many,
        cls: type[_V],
        params: Params | None = None,
        *,
        prepare: bool | None = None,
    ) -> list[_V]:
        async with conn.cursor(row_factory=class_row(cls)) as cur:
            await self._execute(cur, name, params, prepare=prepare)
            return await cur.fetchall()

    async def _tuples(
        self, conn: Conn, name: Many, cls: type[_V], params: Params, *, prepare: bool
    ) -> list[_V]:
        """Rows as ``cls(*columns)`` (a NamedTuple): for statements read by the thousand,
        where a dict or keyword arguments per row cost per column. Their columns come in
        binary: a timestamp is then read from a number, not parsed from text."""
        async with conn.cursor(row_factory=args_row(cls)) as cur:
            await self._execute(cur, name, params, prepare=prepare, binary=True)
            return await cur.fetchall()

    async def _plain(self, conn: Conn, name: Many, params: Params) -> list[tuple[Any, ...]]:
        """Rows as tuples of their columns: for statements that return a row per run."""
        async with conn.cursor() as cur:
            await self._execute(cur, name, params)
            return await cur.fetchall()

    async def _execute(
        self,
        cur: psycopg.AsyncCursor[Any],
        name: str,
        params: Params | None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
        partition: str | None = None,
    ) -> None:
        with naming(name):
            await cur.execute(
                self.statement(name, partition), params, prepare=prepare, binary=binary
            )


def ms(duration: timedelta) -> str:
    """``duration`` as a setting's value in milliseconds."""
    return str(int(duration.total_seconds() * 1000))


def record_params(record: Any) -> dict[str, Any]:
    """A dataclass record's fields as parameters, by field name."""
    return {f.name: getattr(record, f.name) for f in fields(record)}


def column(values: list[Any]) -> list[Any] | None:
    """``values`` as an array parameter, or NULL when every one is NULL (rows of
    successes have no errors): ``unnest`` reads a NULL array beside others as NULLs, and
    nothing is sent or decoded for it."""
    return values if any(v is not None for v in values) else None


def plan_span(plans: Iterable[datetime]) -> dict[str, datetime | None]:
    """The rows' first and last plan times: bounds that prune the ledger's partitions before
    a statement runs (None for no rows, which match nothing)."""
    listed = list(plans)
    return {"first_plan": min(listed, default=None), "last_plan": max(listed, default=None)}
