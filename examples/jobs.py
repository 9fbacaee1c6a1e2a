"""Example jobs: run them with `pgsched run examples/jobs.py` (embedded PostgreSQL if no DSN)."""

import asyncio
import random

import pgsched

scheduler = pgsched.Scheduler(tick_interval="1s", max_concurrency=8)


@scheduler.job(every="10s")
def heartbeat_report(run: pgsched.Run) -> int:
    """A fixed-cadence job: one execution per 10-second plan across all replicas."""
    run.log.info("heartbeat_report", plan_time=run.plan_time.isoformat())
    return 1


@scheduler.job(
    every="15s",
    scopes=lambda now: [pgsched.Scope("tenant", t) for t in ("acme", "globex", "initech")],
    max_attempts=3,
    retry_backoff=["2s", "5s"],
    run_timeout="10s",
    stale_timeout="20s",
    heartbeat_interval="5s",
)
async def tenant_sync(run: pgsched.Run) -> pgsched.Result:
    """A fan-out job: one execution per tenant per plan; fails now and then to show retries."""
    await asyncio.sleep(random.uniform(0.1, 1.0))
    if random.random() < 0.2:
        raise RuntimeError(f"upstream for {run.scope.id} is flaky")
    return pgsched.Result(rows_affected=random.randint(1, 100), data={"tenant": run.scope.id})


@scheduler.job(cron="*/1 * * * *", timezone="Europe/Berlin")
def every_minute_berlin(run: pgsched.Run) -> None:
    """A cron job in a time zone (DST rules as in the README's job options)."""
    run.log.info("tick_berlin")
