"""The procrastinate peer (pinned in bench/requirements-peers.txt): periodic tasks.

One task, registered as a periodic task once per scope (``periodic_id`` = the scope, the
scope passed as a task argument), run by a procrastinate worker in each replica; the worker
also runs procrastinate's periodic deferrer, which defers one job per (periodic id, cron
timestamp) and relies on the database to refuse repeats. The handler records the job's
``timestamp`` (its plan time) in the ledger.

``python -m bench.peers.procrastinate_peer setup`` applies procrastinate's schema and marks
the plan that was current when the replicas start as already deferred (``BENCH_SKIP_TS``),
as a previous run of the scheduler would have, so no replica starts with a stale burst.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import UTC, datetime

import procrastinate
import psycopg

from bench.peers import common

TASK = "bench"


def make_app(dsn: str, pool_size: int = 10) -> procrastinate.App:
    return procrastinate.App(
        connector=procrastinate.PsycopgConnector(
            conninfo=dsn, min_size=pool_size, max_size=pool_size
        )
    )


async def setup(dsn: str) -> None:
    app = make_app(dsn)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()
    skip = os.environ.get("BENCH_SKIP_TS")
    scopes = int(os.environ.get("BENCH_SCOPES", "0"))
    if skip and scopes:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(
                "INSERT INTO procrastinate_periodic_defers (task_name, periodic_id, "
                "defer_timestamp) SELECT %s, lpad(i::text, 6, '0'), %s "
                "FROM generate_series(0, %s - 1) AS i ON CONFLICT DO NOTHING",
                (TASK, int(skip), scopes),
            )


async def main() -> None:
    cfg = common.config()
    common.count_psycopg_statements()
    common.start_reporting(cfg)
    ledger = common.AsyncLedger(cfg)
    app = make_app(cfg.dsn)

    @app.task(name=TASK)
    async def bench(timestamp: int, scope: str) -> None:
        await ledger.record(scope, datetime.fromtimestamp(timestamp, UTC))

    for scope in cfg.scope_ids():
        app.periodic(cron=cfg.cron(), periodic_id=scope, task_kwargs={"scope": scope})(bench)
    async with app.open_async():
        await app.run_worker_async(
            concurrency=min(cfg.concurrency, 50),
            name=cfg.runner,
            wait=True,
            install_signal_handlers=True,
            shutdown_graceful_timeout=10,
        )


if __name__ == "__main__":
    if sys.argv[1:] == ["setup"]:
        asyncio.run(setup(os.environ["BENCH_DSN"]))
    else:
        asyncio.run(main())
