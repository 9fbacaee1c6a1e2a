"""The public API as a user's type checker sees it: mypy (strict) checks this module in CI
and pre-commit; it is never run. Each ``assert_type`` pins a public signature's type, and
each ``# type: ignore[...]`` marks a call that must stay a type error (mypy's
warn_unused_ignores fails the check if it stops being one)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any, assert_type, cast
from uuid import UUID

import pgsched

scheduler = pgsched.Scheduler(dsn="postgresql://localhost/app", max_concurrency=4)


@scheduler.job(every="5m", catch_up="every_plan", max_plans_per_tick=3)
def rollup(run: pgsched.Run) -> int:
    assert_type(run.job, str)
    assert_type(run.scope, pgsched.Scope)
    assert_type(run.plan_time, datetime)
    assert_type(run.attempt, int)
    assert_type(run.execution_id, UUID)
    assert_type(run.payload, dict[str, Any])
    run.heartbeat()
    return 1


@scheduler.job(cron="0 9 * * 1-5", timezone="Europe/Berlin", transactional=True)
async def report(run: pgsched.Run) -> pgsched.Result:
    return pgsched.Result(rows_affected=1, data={"tenant": run.scope.id})


@scheduler.job(every="10m", scopes=[pgsched.Scope("tenant", "1")], batch_size=500)
async def refresh(batch: pgsched.Batch) -> None:
    assert_type(batch.job, str)
    assert_type(len(batch), int)
    assert_type(batch[0], pgsched.Run)
    for run in batch:
        assert_type(run, pgsched.Run)
        run.succeed(pgsched.Result(rows_affected=1))
        run.fail(ValueError("no such tenant"))
        run.fail("no such tenant")
        run.fail(3)  # type: ignore[arg-type]


@scheduler.job(
    planner=pgsched.working_day(-1, at="18:00"),
    timezone="Europe/Berlin",
    calendar=pgsched.Calendar("mon-fri", exclude=[(date(2026, 12, 24), date(2026, 12, 31))]),
    on_excluded="next_working_day",
)
def month_end(run: pgsched.Run) -> None: ...


scheduler.job(cron="0 9 * * *", on_excluded="tomorrow")  # type: ignore[arg-type]
assert_type(pgsched.Calendar().is_working_day(date(2026, 1, 6)), bool)

# The decorator returns the handler as given (were it Any, so would the call be).
assert_type(rollup(cast(pgsched.Run, None)), int)


def tenants(now: datetime) -> list[pgsched.Scope]:
    return [pgsched.Scope("tenant", "acme")]


options: pgsched.JobOptions = {"name": "typed", "every": timedelta(minutes=1), "scopes": tenants}
spec = scheduler.register(lambda run: None, **options)
assert_type(spec, pgsched.JobSpec)

scheduler.job(every="1m", retries=3)  # type: ignore[call-arg]
scheduler.job(every="1m", catch_up="sometimes")  # type: ignore[arg-type]

assert_type(scheduler.upcoming("rollup", count=2), list[datetime])

admin = pgsched.Admin(dsn="postgresql://localhost/app")
assert_type(admin.status(), list[pgsched.JobStatus])
assert_type(admin.trigger("rollup"), pgsched.Triggered)
assert_type(admin.trigger("rollup", all_scopes=True), list[pgsched.Triggered])
assert_type(
    admin.trigger("rollup", pgsched.Scope("tenant", "1"), datetime.now(UTC)), pgsched.Triggered
)
assert_type(admin.runs("rollup", limit=5, scope=pgsched.GLOBAL), list[pgsched.Execution])
last = admin.runs(limit=5)[-1]
assert_type(
    admin.runs(limit=5, after=(last.plan_time, last.job, last.scope)), list[pgsched.Execution]
)
assert_type(admin.run(UUID(int=1)), pgsched.RunHistory)
assert_type(admin.explain("rollup"), pgsched.Explanation)
assert_type(admin.replicas(), list[pgsched.LiveReplica])
assert_type(admin.put_schedule("dyn", pgsched.Scope("tenant", "1"), every="1h"), pgsched.Schedule)
admin.put_schedule("dyn", pgsched.Scope("tenant", "1"), every="1h", tz="UTC")  # type: ignore[arg-type]
assert_type(admin.pause("rollup"), None)


async def operate(aio: pgsched.AsyncAdmin) -> None:
    assert_type(await aio.status(), list[pgsched.JobStatus])
    assert_type(await aio.trigger("rollup"), pgsched.Triggered)
    assert_type(await aio.trigger("rollup", all_scopes=True), list[pgsched.Triggered])
    assert_type(await aio.runs(status="FAILED"), list[pgsched.Execution])


assert_type(scheduler.aio, pgsched.AsyncAdmin)
assert_type(scheduler.run_once(), pgsched.TickReport)

try:
    admin.resume("nosuch")
except pgsched.NotFoundError as exc:
    assert_type(exc, pgsched.NotFoundError)
    error: pgsched.PgschedError = exc
