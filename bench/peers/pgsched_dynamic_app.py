"""The pgsched replica of the schedules-as-data workloads (g, h, i): the APP of
``python -m pgsched run bench.peers.pgsched_dynamic_app``.

One dynamic job (``dynamic=True``): every scope's schedule is put at run time by the driver
(``bench.peers.pgsched_driver``) through ``pgsched.Admin``. The handler is the benchmark's
(``bench.peers.common.handler``): one INSERT into the ledger per execution.
"""

from __future__ import annotations

import pgsched
from bench.peers import common

cfg = common.config()
common.count_psycopg_statements()
common.start_reporting(cfg)
ledger = common.AsyncLedger(cfg)

scheduler = pgsched.Scheduler(
    runner_id=cfg.runner,
    tick_interval="1s",
    max_concurrency=cfg.concurrency,
)


@scheduler.job(name=cfg.job, dynamic=True, run_timeout="5m")
async def bench(run: pgsched.Run) -> None:
    await common.handler(ledger, run.scope.id, run.plan_time)
