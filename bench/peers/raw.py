"""The physical limit: the same rows claimed, recorded and finished by bare batched SQL.

Each replica claims the due plans in batches with one ``INSERT ... SELECT FROM unnest(...)
ON CONFLICT DO NOTHING RETURNING``, records the won rows in the ledger with one batched
INSERT (its "handler"), and finishes them with one ``UPDATE ... WHERE id = ANY(...)``. No
leases, heartbeats, overlap checks or per-run Python: what PostgreSQL and the network allow.
Like pgsched it ticks once a second and at the instant a plan falls due.
Replicas start at different batches so they mostly do not collide; ON CONFLICT settles it
when they do. The time spent in the claim and finish statements alone is reported too.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from datetime import datetime

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
RECORD = f"""
INSERT INTO {common.LEDGER_TABLE} (job, scope, plan_time, runner)
SELECT %(job)s, b.scope, b.plan_time, %(runner)s
FROM unnest(%(scopes)s::text[], %(plans)s::timestamptz[]) AS b(scope, plan_time)
"""
FINISH = """
UPDATE pgsched.cron_executions
SET status = 'SUCCESS', finished_at = now(), updated_at = now()
WHERE id = ANY(%(ids)s::uuid[])
"""


async def main() -> None:
    cfg = common.config()
    common.count_psycopg_statements()
    common.start_reporting(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    done: set[datetime] = set()
    scopes = cfg.scope_ids()
    batches = [scopes[i : i + BATCH] for i in range(0, len(scopes), BATCH)]
    counters = common.COUNTERS
    async with await psycopg.AsyncConnection.connect(cfg.dsn, autocommit=True) as conn:
        while not stop.is_set():
            started = time.monotonic()
            now = (await (await conn.execute("SELECT clock_timestamp()")).fetchone())[0]  # type: ignore[index]
            for plan in common.due_plans(now, cfg):
                if plan in done:
                    continue
                done.add(plan)
                for k in range(len(batches)):
                    if stop.is_set():
                        break
                    batch = batches[(k + cfg.replica) % len(batches)]
                    params = {
                        "job": cfg.job,
                        "runner": cfg.runner,
                        "scopes": batch,
                        "plans": [plan] * len(batch),
                    }
                    t = time.perf_counter()
                    rows = await (await conn.execute(CLAIM, params)).fetchall()
                    counters.add("claim_s", time.perf_counter() - t)
                    counters.add("claimed", len(rows))
                    if not rows:
                        continue
                    won = {
                        "job": cfg.job,
                        "runner": cfg.runner,
                        "scopes": [r[1] for r in rows],
                        "plans": [r[2] for r in rows],
                    }
                    await conn.execute(RECORD, won)
                    t = time.perf_counter()
                    await conn.execute(FINISH, {"ids": [r[0] for r in rows]})
                    counters.add("finish_s", time.perf_counter() - t)
            # Tick once a second, and at the instant the next plan falls due (like pgsched).
            due_in = (common.floor_plan(now, cfg.every_s) - now).total_seconds() + cfg.every_s
            elapsed = time.monotonic() - started
            delay = max(0.0, min(1.0 - elapsed, due_in + 0.005 - elapsed))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)


if __name__ == "__main__":
    asyncio.run(main())
