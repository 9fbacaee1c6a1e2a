"""Joint claims: the due plans of many jobs (a beat_schedule's entries) claimed in one
transaction, each plan still won by exactly one replica, the free slots still a bound, and a
job whose claim is not the plain one still claimed in its own."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

import pgsched
from pgsched._engine.visits import JOINT_CURSORS
from pgsched._storage.claims import ClaimStore
from tests.integration.conftest import SchedulerFactory
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import count, insert_row, rows
from tests.support.threads import Recorder, run_together

JOBS = 120


def _spy(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count each replica's joint claim statements (the statement itself runs as it is)."""
    calls: Counter[str] = Counter()
    real = ClaimStore.claim_cursors_of_jobs

    async def counted(self: ClaimStore, conn: Any, runner: str, *args: Any) -> Any:
        calls[runner] += 1
        return await real(self, conn, runner, *args)

    monkeypatch.setattr(ClaimStore, "claim_cursors_of_jobs", counted)
    return calls


def test_three_replicas_claim_many_jobs_jointly_each_plan_once(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _spy(monkeypatch)
    plan = past_plan(db)
    recorder = Recorder()
    scopes: dict[str, pgsched.Scope] = {}

    def entry(run: pgsched.Run) -> None:
        recorder.enter(run)
        assert run.scope is scopes[run.job]  # the job's own Scope object
        recorder.leave()

    schedulers = [make_scheduler(f"r{i}", max_concurrency=JOBS) for i in range(3)]
    for i in range(JOBS):
        name = f"entry-{i:03d}"
        scopes[name] = pgsched.Scope("entry", str(i))
        for s in schedulers:
            s.register(entry, name=name, planner=FixedPlans(plan), scopes=[scopes[name]])

    reports = run_together([s.run_once for s in schedulers])

    assert sum(r.claimed for r in reports) == JOBS, reports
    assert sum(r.succeeded for r in reports) == JOBS, reports
    assert len(recorder) == JOBS
    stored = rows(db, migrated)
    assert Counter(r["job_name"] for r in stored) == {f"entry-{i:03d}": 1 for i in range(JOBS)}
    assert {r["status"] for r in stored} == {"SUCCESS"}
    # The replicas claimed the 120 jobs JOINT_CURSORS at a time (one statement each time),
    # not one transaction each: each made at most as many joint claims as that takes.
    assert calls and max(calls.values()) <= -(-JOBS // JOINT_CURSORS), calls


def test_a_joint_claim_takes_no_more_than_the_free_slots(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    plan = past_plan(db)
    s = make_scheduler(max_concurrency=5)
    for i in range(20):
        s.register(lambda run: None, name=f"entry-{i:02d}", planner=FixedPlans(plan))

    first = s.run_once()

    assert first.claimed == 5, first
    assert len(rows(db, migrated)) == 5
    deadline = time.monotonic() + 30
    while count(db, migrated, "status = 'SUCCESS'") < 20:  # later ticks take the rest
        assert time.monotonic() < deadline, "the other 15 plans were never claimed"
        assert s.run_once().claimed <= 5
    assert Counter(r["job_name"] for r in rows(db, migrated)) == {
        f"entry-{i:02d}": 1 for i in range(20)
    }


def test_a_job_with_a_retry_due_claims_alone_beside_a_joint_claim(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job with a row to take over (a retry due) keeps its own claim; the others join."""
    calls = _spy(monkeypatch)
    plan = past_plan(db)
    s = make_scheduler()
    ran: list[str] = []
    for name in ("a-plain", "b-retry", "c-plain"):
        s.register(lambda run: ran.append(run.job), name=name, planner=FixedPlans(plan))
    insert_row(
        db,
        migrated,
        job_name="b-retry",
        plan_time=plan,
        status="FAILED",
        attempt=1,
        max_attempts=3,
        next_retry_at=plan,
    )

    report = s.run_once()

    assert sorted(ran) == ["a-plain", "b-retry", "c-plain"], report
    (retried,) = rows(db, migrated, "b-retry")
    assert retried["status"] == "SUCCESS" and retried["attempt"] == 2
    assert calls == {"r1": 1}, calls  # the two plain jobs, jointly
