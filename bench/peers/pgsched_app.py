"""The pgsched replica: the APP of ``python -m pgsched run bench.peers.pgsched_app``.

One job with the workload's scopes and cadence; its handler records the execution with one
INSERT into the ledger (``bench.peers.common.handler``, which the limit with a Python handler,
``bench.peers.raw_handler``, runs too). ``batched`` holds the same job as a batch handler
(``pgsched_batch``): each call records its runs with one INSERT, as the raw limit does.
"""

from __future__ import annotations

from typing import Any

import pgsched
from bench.peers import common

cfg = common.config()
common.count_psycopg_statements()
common.start_reporting(cfg)
ledger = common.AsyncLedger(cfg)

# Batch handlers (``pgsched_batch``): the same job with a handler that takes this many runs at
# once and records them with one INSERT, as the raw limit records a claimed batch.
BATCH_SIZE = 500


def _scheduler() -> pgsched.Scheduler:
    return pgsched.Scheduler(
        runner_id=cfg.runner, tick_interval="1s", max_concurrency=cfg.concurrency
    )


scheduler = _scheduler()  # the APP bench.peers.pgsched_app
batched = _scheduler()  # the APP bench.peers.pgsched_app:batched

_options: dict[str, Any] = {
    "name": cfg.job,
    "every": cfg.every_s,
    "scopes": [pgsched.Scope("tenant", s) for s in cfg.scope_ids()],
    "run_timeout": "5m",
    "overlap": cfg.overlap,
}
if cfg.catch_up == "every_plan":
    _options |= {
        "catch_up": "every_plan",
        "catch_up_window": cfg.catch_up_window_s,
        "max_plans_per_tick": cfg.max_plans_per_tick,
    }


@scheduler.job(**_options)
async def bench(run: pgsched.Run) -> None:
    await common.handler(ledger, run.scope.id, run.plan_time)


@batched.job(**_options, batch_size=BATCH_SIZE)
async def bench_batch(batch: pgsched.Batch) -> None:
    await ledger.record_many([run.scope.id for run in batch], [run.plan_time for run in batch])
