"""The replica's lease table (``pgsched._engine.leases``): slots, the per-scope chains of
``overlap="forbid"``, losses counted once, the slots-freed callback, and the lease of a fresh
claim."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
import structlog

import pgsched
from pgsched._engine.leases import open_lease
from tests.unit.engine_fakes import PLAN, claim, idle, job, lease, recorder, sample, table

A, B = pgsched.Scope("tenant", "a"), pgsched.Scope("tenant", "b")


def test_holding_takes_a_slot_and_releasing_frees_it() -> None:
    leases, _ = table(max_concurrency=3)
    spec = job()
    first, second = lease(spec, scope=A), lease(spec, scope=B)
    leases.hold([first])
    leases.hold([second])
    assert (len(leases), leases.free, bool(leases)) == (2, 1, True)
    assert set(leases.all()) == {first, second}
    leases.release(first)
    assert (len(leases), leases.free) == (1, 2)
    assert first.done and not second.done
    leases.release(second)
    assert (len(leases), bool(leases)) == (0, False)


def test_forbid_chains_a_scopes_later_lease_after_its_earlier_one() -> None:
    leases, _ = table()
    spec = job(overlap="forbid")
    earlier, later = lease(spec, scope=A), lease(spec, scope=A, plan=PLAN + timedelta(minutes=1))
    other_scope = lease(spec, scope=B)
    for held in (earlier, later, other_scope):
        leases.hold([held])
    assert earlier.previous is None
    assert later.previous is earlier
    assert other_scope.previous is None


def test_allow_chains_nothing() -> None:
    leases, _ = table()
    spec = job(overlap="allow")
    earlier, later = lease(spec, scope=A), lease(spec, scope=A, plan=PLAN + timedelta(minutes=1))
    leases.hold([earlier])
    leases.hold([later])
    assert later.previous is None


def test_the_chain_follows_the_scopes_newest_lease_held() -> None:
    leases, _ = table()
    spec = job(overlap="forbid")
    plans = [PLAN + timedelta(minutes=i) for i in range(4)]
    first, second = lease(spec, scope=A, plan=plans[0]), lease(spec, scope=A, plan=plans[1])
    leases.hold([first])
    leases.hold([second])
    leases.release(first)  # not the newest: the next one still waits for the second
    third = lease(spec, scope=A, plan=plans[2])
    leases.hold([third])
    assert third.previous is second
    leases.release(second)
    leases.release(third)  # the newest: nothing of the scope is held any more
    fourth = lease(spec, scope=A, plan=plans[3])
    leases.hold([fourth])
    assert fourth.previous is None


def test_a_lost_lease_is_counted_once_however_often_it_is_found_lost() -> None:
    rec = recorder()
    leases, _ = table(rec=rec)
    spec = job()
    held = lease(spec)
    leases.hold([held])
    leases.lose(held, "heartbeat matched no row", release=False)  # the handler still runs
    assert len(leases) == 1, "its handler's outcome releases the slot"
    assert held.liveness.known_lost and held.run.lease_lost
    with pytest.raises(pgsched.LeaseLost):
        held.run.heartbeat()
    leases.lose(held, "terminal write matched no row")
    assert len(leases) == 0 and held.done
    assert rec.report.leases_lost == 1
    assert sample(rec, "pgsched_leases_lost_total", job="job") == 1


def test_freed_slots_are_reported_once_a_quarter_of_them_is_free() -> None:
    leases, freed = table(max_concurrency=8)
    spec = job(overlap="allow")
    held = [lease(spec, scope=pgsched.Scope("s", str(i))) for i in range(8)]
    for one in held:
        leases.hold([one])
    leases.note_backlog()
    leases.release(held[0])
    assert freed == [], "one free slot of eight: claiming again would claim one row"
    leases.release(held[1])
    assert freed == [1], "two of eight (a quarter) free: claim again now"
    leases.release(held[2])
    assert freed == [1], "reported once per backlog"


def test_freed_slots_are_not_reported_without_a_backlog() -> None:
    leases, freed = table(max_concurrency=2)
    spec = job()
    held = lease(spec)
    leases.hold([held])
    leases.release(held)
    assert freed == []


def test_the_last_lease_released_reports_a_backlog_whatever_the_quarter() -> None:
    leases, freed = table(max_concurrency=100)
    held = lease(job())
    leases.hold([held])
    leases.note_backlog()
    leases.release(held)
    assert freed == [1]


def test_heartbeats_are_due_for_live_leases_past_their_time_only() -> None:
    leases, _ = table()
    spec = job(overlap="allow")
    due, later, abandoned, lost = (lease(spec, scope=pgsched.Scope("s", str(i))) for i in range(4))
    now = time.monotonic()
    for one in (due, abandoned, lost):
        one.renewed(now - 1 - spec.heartbeat_interval.total_seconds())  # a beat 1 s overdue
    later.renewed(now + 60)
    abandoned.abandon()
    lost.liveness.mark_lost()
    for one in (due, later, abandoned, lost):
        leases.hold([one])
    assert leases.due_for_heartbeat(now) == [due]


def test_wait_idle_returns_once_every_lease_is_released() -> None:
    async def scenario() -> None:
        leases, _ = table()
        spec = job(overlap="allow")
        first, second = lease(spec, scope=A), lease(spec, scope=B)
        leases.hold([first])
        leases.hold([second])
        waiting = asyncio.ensure_future(leases.wait_idle())
        leases.release(first)
        await asyncio.sleep(0)  # let the waiter see the first release
        assert not waiting.done()
        leases.release(second)
        await asyncio.wait_for(waiting, 5)
        await idle(leases)  # and at once when nothing is held

    asyncio.run(scenario())


def test_a_fresh_lease_carries_the_claim_and_its_lag() -> None:
    spec = job(schedule_delay="10s", heartbeat_interval="2s", stale_timeout="11m")
    started = PLAN + timedelta(seconds=13)
    before = time.monotonic()
    held = lease(spec, scope=A, started_at=started, attempt=1, max_attempts=3)
    run = held.run
    assert (run.job, run.scope, run.plan_time, run.attempt, run.max_attempts) == (
        "job",
        A,
        PLAN,
        1,
        3,
    )
    assert run.runner_id == "r1" and run.trigger == "schedule" and run.payload == {}
    assert held.claim_lag == pytest.approx(3.0), "claimed 13 s after the plan, due after 10 s"
    assert before + 2 <= held.next_beat <= time.monotonic() + 2
    assert not run.lease_lost


@pytest.mark.parametrize(
    ("kind", "trigger"), [("stole", "schedule"), ("retry", "schedule"), ("won", "manual")]
)
def test_only_a_first_claim_of_a_scheduled_plan_has_a_lag(kind: str, trigger: str) -> None:
    held = lease(job(), kind=kind, trigger=trigger, started_at=PLAN + timedelta(seconds=5))
    assert held.claim_lag is None
    assert held.kind == kind


def test_a_batch_takes_one_slot_freed_when_its_last_run_is_released() -> None:
    leases, _ = table(max_concurrency=2)
    spec = job(batch_size=10)
    batch = [lease(spec, scope=pgsched.Scope("tenant", str(i))) for i in range(5)]
    leases.hold(batch)
    assert (len(leases), leases.free) == (5, 1)
    for one in batch[:4]:
        leases.release(one)
    leases.release(batch[0])  # released twice: counted once
    assert (len(leases), leases.free) == (1, 1)
    leases.lose(batch[4], "stolen")
    assert (len(leases), leases.free) == (0, 2)


def test_a_batch_claimed_together_is_renewed_together() -> None:
    leases, _ = table()
    spec = job(batch_size=3, heartbeat_interval=timedelta(seconds=1))
    now = time.monotonic()
    batch = [
        open_lease(spec, claim(scope=pgsched.Scope("t", str(i))), "r", structlog.get_logger(), now)
        for i in range(3)
    ]
    leases.hold(batch)
    assert leases.due_for_heartbeat(now + 0.5) == []
    assert leases.due_for_heartbeat(now + 1.0) == batch


def test_a_job_claims_within_its_fair_share_while_others_have_due_work() -> None:
    leases, _ = table(max_concurrency=5)
    backlog, other = job(name="backlog"), job(name="other")
    assert leases.free_for("backlog", contenders=1) == 5  # alone: every free slot
    assert leases.free_for("backlog", contenders=2) == 3  # ceil(5 / 2)
    held = [lease(backlog, scope=pgsched.Scope("tenant", str(i))) for i in range(3)]
    for one in held:
        leases.hold([one])
    assert leases.free_for("backlog", contenders=2) == 0  # its share is held
    assert leases.free_for("other", contenders=2) == 2  # the free slots, within its share
    leases.hold([lease(other, scope=A)])
    assert leases.free_for("other", contenders=3) == 1  # ceil(5 / 3) = 2, one held
    leases.release(held[0])
    assert leases.free_for("backlog", contenders=2) == 1
    assert leases.free_for("backlog", contenders=1) == 2  # the others' work is done: all free


def test_a_batch_counts_one_slot_of_its_jobs_share() -> None:
    leases, _ = table(max_concurrency=4)
    spec = job(name="batched", batch_size=10)
    batch = [lease(spec, scope=pgsched.Scope("tenant", str(i))) for i in range(5)]
    leases.hold(batch)
    assert leases.free_for("batched", contenders=2) == 1  # ceil(4 / 2) = 2, one held
    for one in batch:
        leases.release(one)
    assert leases.free_for("batched", contenders=2) == 2
