"""The oban peer (oban-py, pinned in bench/requirements-oban.txt): a cron job that fans out.

oban's cron is minute-resolution and evaluated by the cluster's leader alone, and a cron
entry carries no scope; so a workload of N scopes is one cron worker (``FanOut``) whose job,
once a minute, enqueues one ``ScopeRun`` job per scope with ``Oban.enqueue_many`` (which
inserts them one statement each, in one transaction), as oban-py's docs suggest for work
over many records. Every replica runs both queues; ``ScopeRun`` runs the benchmark's
handler, with the plan time taken from the cron job's ``cron_at``. Only cadences of whole
minutes fit; a minute missed while no leader was up is not run.

``python -m bench.peers.oban_peer setup`` installs oban's schema (``oban.schema.install_sql``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import datetime
from typing import Any

from bench.peers import common

ENQUEUE_CHUNK = 5_000  # jobs per enqueue_many call (one transaction each)


async def setup(dsn: str) -> None:
    import psycopg
    from oban.schema import install_sql

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(install_sql())


async def main() -> None:
    from oban import Oban, worker

    cfg = common.config()
    common.start_reporting(cfg)
    if cfg.every_s % 60:
        raise SystemExit(f"oban's cron is minute-resolution: no cadence of {cfg.every_s} s")
    ledger = common.AsyncLedger(cfg)
    scopes = cfg.scope_ids()

    @worker(queue="bench")
    class ScopeRun:
        async def process(self, job: Any) -> None:
            plan = datetime.fromisoformat(job.args["plan"])
            await common.handler(ledger, job.args["scope"], plan)

    @worker(queue="fanout", cron=cfg.cron())
    class FanOut:
        async def process(self, job: Any) -> None:
            plan = job.meta["cron_at"]
            oban = Oban.get_instance()
            for i in range(0, len(scopes), ENQUEUE_CHUNK):
                chunk = scopes[i : i + ENQUEUE_CHUNK]
                await oban.enqueue_many(
                    [ScopeRun.new({"scope": s, "plan": plan}) for s in chunk]  # type: ignore[attr-defined]
                )

    pool = await Oban.create_pool(cfg.dsn, min_size=2, max_size=cfg.ledger_pool)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    oban = Oban(
        pool=pool,
        node=f"bench-{cfg.runner}",
        queues={"bench": cfg.concurrency, "fanout": 1},
        shutdown_grace_period=5.0,
    )
    async with oban:
        await stop.wait()
    await pool.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["setup"]:
        asyncio.run(setup(os.environ["BENCH_DSN"]))
    else:
        asyncio.run(main())
