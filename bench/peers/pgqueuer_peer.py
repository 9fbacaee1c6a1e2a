"""The pgqueuer peer (pinned in bench/requirements-peers.txt): one schedule per scope.

pgqueuer schedules carry no scope, so a workload of N scopes is N schedules (entrypoints
``bench_<scope>``) with the same cron expression, served by pgqueuer's ``SchedulerManager``
on its default asyncpg driver. A schedule row is picked, run, and put back to ``queued``
with its next run time, so a run stands for the latest occurrence at or before its pick:
the plan time recorded in the ledger is ``next_run`` less one cadence. Periods missed while
the scheduler was behind are not run (they show as incomplete).

``python -m bench.peers.pgqueuer_peer setup`` installs pgqueuer's schema.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import asyncpg

from bench.peers import common


async def setup(dsn: str) -> None:
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries

    conn = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


async def main() -> None:
    from pgqueuer.db import AsyncpgDriver
    from pgqueuer.queries import Queries
    from pgqueuer.sm import SchedulerManager

    cfg = common.config()
    common.start_reporting(cfg)
    every = timedelta(seconds=cfg.every_s)
    conn = await asyncpg.connect(cfg.dsn)
    ledger = await asyncpg.create_pool(cfg.dsn, min_size=cfg.ledger_pool, max_size=cfg.ledger_pool)
    sm = SchedulerManager(Queries(AsyncpgDriver(conn)))
    expression = cfg.cron()

    def handler_for(scope: str) -> Callable[[Any], Awaitable[None]]:
        async def handler(schedule: Any) -> None:
            plan = common.floor_plan(schedule.next_run - every / 2, cfg.every_s)
            await ledger.execute(common.LEDGER_INSERT_DOLLAR, cfg.job, scope, plan, cfg.runner)

        return handler

    for scope in cfg.scope_ids():
        sm.schedule(f"bench_{scope}", expression)(handler_for(scope))
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, sm.shutdown.set)
    await sm.run()
    await ledger.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["setup"]:
        asyncio.run(setup(os.environ["BENCH_DSN"]))
    else:
        asyncio.run(main())
