"""The physical limit: the same rows claimed, recorded and finished by bare batched SQL.

Each replica claims the due plans in batches with one ``INSERT ... SELECT FROM unnest(...)
ON CONFLICT DO NOTHING RETURNING``, records the won rows in the ledger with one batched
INSERT (its "handler"), and finishes them with one ``UPDATE ... WHERE id = ANY(...)``. No
leases, heartbeats, overlap checks or per-run Python: what PostgreSQL and the network allow.
Like pgsched it ticks once a second and at the instant a plan falls due.
Replicas start at different batches so they mostly do not collide; ON CONFLICT settles it
when they do. The time spent in the claim and finish statements alone is reported too.

:class:`Replica` is shared with ``bench.peers.raw_handler``, which settles each claimed
batch by running a Python handler per execution instead of one batched ledger INSERT.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from datetime import datetime
from typing import Any

import psycopg

from bench.peers import common

BATCH = 5000
CLAIM = """
INSERT INTO pgsched.cron_executions AS x
    (job_name, scope_kind, scope_id, plan_time, trigger, status, attempt, max_attempts,
     runner_id, heartbeat_at, stale_after, started_at)
SELECT %(job)s, 'tenant', b.scope, b.plan_time, 'schedule', 'RUNNING', 1, 1,
       %(runner)s, now(), now() + interval '5 minutes', now()
FROM unnest(%(scopes)s::text[], %(plans)s::timestamptz[]) AS b(scope, plan_time)
ORDER BY b.plan_time, b.scope
ON CONFLICT DO NOTHING
RETURNING x.id, x.scope_id, x.plan_time
"""
FINISH = """
UPDATE pgsched.cron_executions
SET status = 'SUCCESS', finished_at = now(), updated_at = now()
WHERE id = ANY(%(ids)s::uuid[])
"""

Conn = psycopg.AsyncConnection[Any]
Claimed = list[tuple[Any, ...]]  # (id, scope, plan_time) of the rows won


class Replica:
    """One replica: ticks, claims each due plan in batches, settles each claimed batch."""

    def __init__(self, cfg: common.Config) -> None:
        self.cfg = cfg
        self.counters = common.COUNTERS
        self.stop = asyncio.Event()
        scopes = cfg.scope_ids()
        self.batches = [scopes[i : i + BATCH] for i in range(0, len(scopes), BATCH)]

    async def main(self) -> None:
        common.count_psycopg_statements()
        common.start_reporting(self.cfg)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stop.set)
        async with await psycopg.AsyncConnection.connect(self.cfg.dsn, autocommit=True) as conn:
            await self.open()
            try:
                await self.tick_loop(conn)
            finally:
                await self.close()

    async def open(self) -> None:
        """Anything the settling needs besides the claiming connection."""

    async def close(self) -> None:
        """Wait for anything still settling."""

    async def tick_loop(self, conn: Conn) -> None:
        done: set[datetime] = set()
        cfg = self.cfg
        while not self.stop.is_set():
            started = time.monotonic()
            now = (await (await conn.execute("SELECT clock_timestamp()")).fetchone())[0]  # type: ignore[index]
            for plan in common.due_plans(now, cfg):
                if plan not in done:
                    done.add(plan)
                    await self.fan_out(conn, plan)
            # Tick once a second, and at the instant the next plan falls due (like pgsched).
            due_in = (common.floor_plan(now, cfg.every_s) - now).total_seconds() + cfg.every_s
            elapsed = time.monotonic() - started
            delay = max(0.0, min(1.0 - elapsed, due_in + 0.005 - elapsed))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), delay)

    async def fan_out(self, conn: Conn, plan: datetime) -> None:
        """Claim ``plan`` for every scope, a batch at a time, starting at this replica's."""
        for k in range(len(self.batches)):
            if self.stop.is_set():
                break
            batch = self.batches[(k + self.cfg.replica) % len(self.batches)]
            rows = await self.claim(conn, batch, plan)
            if rows:
                await self.settle(conn, rows)

    async def claim(self, conn: Conn, batch: list[str], plan: datetime) -> Claimed:
        params = {"scopes": batch, "plans": [plan] * len(batch)}
        t = time.perf_counter()
        rows = await (await conn.execute(CLAIM, self.params(params))).fetchall()
        self.counters.add("claim_s", time.perf_counter() - t)
        self.counters.add("claimed", len(rows))
        return rows

    async def settle(self, conn: Conn, rows: Claimed) -> None:
        """Record the won rows with one batched ledger INSERT, then finish them."""
        won = {"scopes": [r[1] for r in rows], "plans": [r[2] for r in rows]}
        await conn.execute(common.LEDGER_INSERT_MANY, self.params(won))
        await self.finish(conn, rows)

    async def finish(self, conn: Conn, rows: Claimed) -> None:
        t = time.perf_counter()
        await conn.execute(FINISH, {"ids": [r[0] for r in rows]})
        self.counters.add("finish_s", time.perf_counter() - t)

    def params(self, extra: dict[str, Any]) -> dict[str, Any]:
        return {"job": self.cfg.job, "runner": self.cfg.runner, **extra}


if __name__ == "__main__":
    asyncio.run(Replica(common.config()).main())
