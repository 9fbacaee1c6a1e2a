"""The seed design, as a baseline: one INSERT ... ON CONFLICT DO NOTHING per plan to claim it,
then one follow-up UPDATE per plan to finish it (the Go scheduler pgsched was inspired by).

Every tick each replica walks the scopes in order and tries each due plan it has not tried
yet; a won plan runs its handler (the ledger INSERT) in a task and is then marked SUCCESS.
It uses pgsched's own ``cron_executions`` table, so both designs write the same rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from datetime import datetime

import psycopg

from bench.peers import common

CLAIM = """
INSERT INTO pgsched.cron_executions
    (job_name, scope_kind, scope_id, plan_time, trigger, status, attempt, max_attempts,
     runner_id, heartbeat_at, stale_after, started_at)
VALUES (%s, 'tenant', %s, %s, 'schedule', 'RUNNING', 1, 1,
        %s, now(), now() + interval '5 minutes', now())
ON CONFLICT DO NOTHING
RETURNING id
"""
FINISH = """
UPDATE pgsched.cron_executions
SET status = 'SUCCESS', finished_at = now(), updated_at = now()
WHERE id = %s AND status = 'RUNNING'
"""


async def main() -> None:
    cfg = common.config()
    common.count_psycopg_statements()
    common.start_reporting(cfg)
    ledger = common.AsyncLedger(cfg)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    slots = asyncio.Semaphore(cfg.concurrency)
    tried: dict[str, datetime] = {}
    tasks: set[asyncio.Task[None]] = set()

    async def execute(execution_id: object, scope: str, plan: datetime) -> None:
        try:
            await ledger.record(scope, plan)
            await ledger.execute(FINISH, (execution_id,))
        finally:
            slots.release()

    async with await psycopg.AsyncConnection.connect(cfg.dsn, autocommit=True) as conn:
        scopes = cfg.scope_ids()
        while not stop.is_set():
            started = time.monotonic()
            now = (await (await conn.execute("SELECT clock_timestamp()")).fetchone())[0]  # type: ignore[index]
            for plan in common.due_plans(now, cfg):
                for scope in scopes:
                    if stop.is_set():
                        break
                    last = tried.get(scope)
                    if last is not None and last >= plan:
                        continue
                    tried[scope] = plan
                    await slots.acquire()
                    cur = await conn.execute(CLAIM, (cfg.job, scope, plan, cfg.runner))
                    row = await cur.fetchone()
                    if row is None:
                        slots.release()
                        continue
                    task = asyncio.create_task(execute(row[0], scope, plan))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
            delay = max(0.0, 1.0 - (time.monotonic() - started))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
        if tasks:
            await asyncio.wait(tasks, timeout=30)


if __name__ == "__main__":
    asyncio.run(main())
