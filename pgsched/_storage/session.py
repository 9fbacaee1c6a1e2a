"""A connection's session: its timeouts and settings, the server it reaches, a transactional
run's commit phase and synchronous commits, and the tick's probe and wake-ups."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from .._records import Probe, Row, running_before
from .statements import Conn, Statements, ms, naming


class SessionStatements(Statements):
    """Statements about the connection and the server rather than pgsched's rows."""

    async def configure_session(
        self,
        conn: Conn,
        statement: timedelta,
        idle: timedelta,
        *,
        local: bool = False,
        handler: bool = False,
    ) -> None:
        """Statement and idle-in-transaction timeouts for the session (or, ``local``, for
        the current transaction only); unless it is a transactional ``handler``'s connection,
        JIT off, timestamps in UTC and ``random_page_cost`` at most 1.1."""
        params = _session_params(statement, idle, local, handler)
        await self._exec(conn, "configure_session", params)

    def configure_session_sync(
        self,
        conn: psycopg.Connection[Any],
        statement: timedelta,
        idle: timedelta,
        *,
        local: bool = False,
        handler: bool = False,
    ) -> None:
        params = _session_params(statement, idle, local, handler)
        with naming("configure_session"):
            conn.execute(self.statement("configure_session"), params)

    async def server_state(self, conn: Conn) -> Row:
        """Whether the server ``conn`` reaches takes writes (``in_recovery``, ``read_only``)
        and which it is (``system_identifier``; ``timeline``, None on a standby)."""
        return await self._one(conn, "server_state")

    def server_state_sync(self, conn: psycopg.Connection[Any]) -> Row:
        """:meth:`server_state` on a sync connection."""
        with conn.cursor(row_factory=dict_row) as cur, naming("server_state"):
            cur.execute(self.statement("server_state"))
            row = cur.fetchone()
        assert row is not None
        return row

    async def synchronous_commit(self, conn: Conn) -> None:
        """The current transaction commits only once a synchronous standby has it."""
        await self._exec(conn, "synchronous_commit")

    async def commit_phase(self, conn: Conn, idle: timedelta, *, synchronous: bool) -> None:
        """A transactional run's handler has returned: the transaction may now sit idle for
        ``idle`` at most and, ``synchronous``, commits once a synchronous standby has it."""
        await self._exec(conn, "commit_phase", _commit_params(idle, synchronous))

    def commit_phase_sync(
        self, conn: psycopg.Connection[Any], idle: timedelta, *, synchronous: bool
    ) -> None:
        """:meth:`commit_phase` on a sync connection."""
        with naming("commit_phase"):
            conn.execute(self.statement("commit_phase"), _commit_params(idle, synchronous))

    async def synchronous_standbys(self, conn: Conn) -> Row:
        """``names`` (synchronous_standby_names), ``synchronous`` (connected sync or quorum
        standbys) and ``hidden`` (walsenders whose state this role may not read)."""
        return await self._one(conn, "synchronous_standbys")

    async def tick_probe(
        self,
        conn: Conn,
        jobs: Sequence[str],
        dynamic: Sequence[str] = (),
        clock: datetime | None = None,
    ) -> Probe:
        """The tick's one read; ``dynamic`` are the jobs whose schedules are their cursors,
        ``clock`` the database's clock at the previous tick (the bound of its reads of RUNNING,
        FAILED and PENDING rows, see running_before)."""
        static = [job for job in jobs if job not in set(dynamic)]
        params = {
            "jobs": list(jobs),
            "dynamic": list(dynamic),
            "static": static,
            "running_before": running_before(clock),
        }
        if conn.prepare_threshold is None:  # behind a transaction pooler: nowhere to keep a plan
            row = await self._one(conn, "tick_probe", params)
        else:
            async with conn.transaction():
                await self._exec(conn, "generic_plans")
                row = await self._one(conn, "tick_probe", params, prepare=True)
        next_due = dict(zip(dynamic, row["dynamic_next"], strict=True))
        next_due.update(zip(static, row["static_next"], strict=True))
        return Probe(
            now=row["now"],
            paused=frozenset(row["paused"]),
            stale_jobs=frozenset(row["stale_jobs"]),
            retry=frozenset(row["retry"]),
            pending=frozenset(row["pending"]),
            replicas=tuple(row["replicas"]),
            next_due=next_due,
        )

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel of this schema (identifiers stop at 63 bytes)."""
        return f"pgsched:{self.schema}"[:63]

    async def notify(self, conn: Conn, payload: str) -> None:
        await self._exec(conn, "notify", {"channel": self.channel, "payload": payload})

    async def listen(self, conn: Conn) -> None:
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))


def _commit_params(idle: timedelta, synchronous: bool) -> dict[str, Any]:
    return {"idle_ms": ms(idle), "synchronous": synchronous}


def _session_params(
    statement: timedelta, idle: timedelta, local: bool, handler: bool
) -> dict[str, Any]:
    return {
        "statement_ms": str(int(statement.total_seconds() * 1000)),
        "idle_ms": str(int(idle.total_seconds() * 1000)),
        "local": local,
        "handler": handler,
    }
