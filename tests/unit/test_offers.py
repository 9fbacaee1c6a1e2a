"""The offer planner (``pgsched._engine.offers``): which plans and scopes a job offers the claim
statement at the database's now, what it remembers between ticks (settled plans, chunks of a
large fan-out still to look at), jitter, skipped-plan counting and the next due time."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

import pgsched
from pgsched._config import JobSpec
from pgsched._engine.offers import CLAIM_CHUNK, OfferPlanner
from pgsched._engine.values import Offer
from pgsched._planning.recurrence import jitter_offset
from tests.unit.engine_fakes import PLAN, job, recorder, sample

MINUTE = timedelta(minutes=1)


def scopes(n: int) -> list[pgsched.Scope]:
    return [pgsched.Scope("shard", str(i)) for i in range(n)]


def offer(planner: OfferPlanner, spec: JobSpec, now: datetime) -> Offer | None:
    return asyncio.run(planner.offer(spec, now))


def test_the_latest_due_plan_is_offered_to_every_scope() -> None:
    spec = job(scopes=scopes(3))
    got = offer(OfferPlanner(recorder(), "r1"), spec, PLAN + timedelta(seconds=20))
    assert got is not None
    assert got.plans == [PLAN]
    assert list(got.scopes) == scopes(3)
    assert (got.chunks, got.chunk, got.settle) == ([0], CLAIM_CHUNK, True)
    assert [list(part) for _, part in got.parts()] == [scopes(3)]


def test_a_settled_plan_is_not_offered_again_until_the_next_one_falls_due() -> None:
    planner, spec = OfferPlanner(recorder(), "r1"), job(scopes=scopes(2))
    first = offer(planner, spec, PLAN + timedelta(seconds=1))
    assert first is not None
    planner.settled(spec, first, [])
    assert offer(planner, spec, PLAN + timedelta(seconds=59)) is None
    nxt = offer(planner, spec, PLAN + MINUTE)
    assert nxt is not None and nxt.plans == [PLAN + MINUTE]


def test_new_scopes_reopen_a_settled_plan() -> None:
    found = scopes(2)
    planner, spec = OfferPlanner(recorder(), "r1"), job(scopes=lambda now: list(found))
    first = offer(planner, spec, PLAN)
    assert first is not None
    planner.settled(spec, first, [])
    assert offer(planner, spec, PLAN + timedelta(seconds=5)) is None, "the same scopes again"
    found.append(pgsched.Scope("shard", "new"))
    again = offer(planner, spec, PLAN + timedelta(seconds=10))
    assert again is not None and len(again.scopes) == 3


def test_only_the_chunks_left_unsettled_are_offered_again() -> None:
    planner, spec = OfferPlanner(recorder(), "r1"), job(scopes=scopes(2 * CLAIM_CHUNK + 500))
    first = offer(planner, spec, PLAN)
    assert first is not None
    assert sorted(first.chunks) == [0, CLAIM_CHUNK, 2 * CLAIM_CHUNK]
    assert sum(len(part) for _, part in first.parts()) == 2 * CLAIM_CHUNK + 500
    planner.settled(spec, first, [CLAIM_CHUNK])  # that chunk had rows left beyond the slots
    second = offer(planner, spec, PLAN)
    assert second is not None and second.chunks == [CLAIM_CHUNK]
    planner.settled(spec, second, [])
    assert offer(planner, spec, PLAN) is None


def test_replicas_walk_a_fan_out_from_different_chunks() -> None:
    spec = job(scopes=scopes(10 * CLAIM_CHUNK))
    starts = list(range(0, 10 * CLAIM_CHUNK, CLAIM_CHUNK))
    firsts = set()
    for runner in (f"replica-{i}" for i in range(8)):
        got = offer(OfferPlanner(recorder(), runner), spec, PLAN)
        assert got is not None
        k = starts.index(got.chunks[0])
        assert got.chunks == starts[k:] + starts[:k], "every chunk, in order from its start"
        firsts.add(k)
    assert len(firsts) > 1


def test_a_failed_claim_forgets_the_settled_plan() -> None:
    planner, spec = OfferPlanner(recorder(), "r1"), job(scopes=scopes(2))
    first = offer(planner, spec, PLAN)
    assert first is not None
    planner.settled(spec, first, [])
    planner.forget("job")  # the claim transaction was rolled back
    again = offer(planner, spec, PLAN)
    assert again is not None and again.plans == [PLAN] and again.chunks == [0]


def test_jitter_offers_each_scope_once_its_offset_has_passed() -> None:
    jitter = timedelta(seconds=30)
    spec = job(scopes=scopes(40), jitter=jitter)
    offsets = {s: jitter_offset("job", s.kind, s.id, PLAN, jitter) for s in scopes(40)}
    now = PLAN + timedelta(seconds=15)
    got = offer(OfferPlanner(recorder(), "r1"), spec, now)
    assert got is not None
    ready = [s for s in scopes(40) if PLAN + offsets[s] <= now]
    assert 0 < len(ready) < 40
    assert list(got.scopes) == ready
    assert not got.settle, "scopes still inside their jitter: the plan is not settled yet"
    later = offer(OfferPlanner(recorder(), "r1"), spec, PLAN + jitter)
    assert later is not None and len(later.scopes) == 40 and later.settle


def test_plans_past_max_lateness_are_skipped_and_counted_once() -> None:
    rec = recorder()
    planner, spec = OfferPlanner(rec, "r1"), job(max_lateness="10s")
    assert offer(planner, spec, PLAN + timedelta(seconds=30)) is None
    assert offer(planner, spec, PLAN + timedelta(seconds=40)) is None
    assert rec.report.skipped == 1
    assert offer(planner, spec, PLAN + MINUTE + timedelta(seconds=30)) is None
    assert rec.report.skipped == 2
    assert sample(rec, "pgsched_plans_skipped_total", job="job", reason="max_lateness") == 2


def test_a_late_plan_every_scope_already_ran_is_not_counted() -> None:
    rec = recorder()
    planner, spec = OfferPlanner(rec, "r1"), job(max_lateness="10s")
    first = offer(planner, spec, PLAN + timedelta(seconds=5))
    assert first is not None
    planner.settled(spec, first, [])
    assert offer(planner, spec, PLAN + timedelta(seconds=30)) is None
    assert rec.report.skipped == 0


def test_superseded_plans_are_counted_per_pair() -> None:
    rec = recorder()
    planner, spec = OfferPlanner(rec, "r1"), job()
    pair = (PLAN, PLAN + 5 * MINUTE)  # four plans lie strictly between
    planner.count_superseded(spec, [pair, pair, (PLAN, PLAN + MINUTE)])
    assert rec.report.skipped == 8
    assert sample(rec, "pgsched_plans_skipped_total", job="job", reason="superseded") == 8


def test_a_failing_scopes_function_offers_nothing_and_is_recorded() -> None:
    def broken(now: Any) -> list[pgsched.Scope]:
        raise RuntimeError("tenant directory down")

    rec = recorder()
    assert offer(OfferPlanner(rec, "r1"), job(scopes=broken), PLAN) is None
    assert rec.report.errors == 1


def test_next_due_is_the_soonest_next_plan_of_any_job() -> None:
    planner = OfferPlanner(recorder(), "r1")
    minutely, hourly = job(name="minutely"), job(name="hourly", every="1h")
    delayed = job(name="delayed", every="1m", schedule_delay="50s")
    jobs = {spec.name: spec for spec in (minutely, hourly, delayed)}
    now = PLAN + timedelta(seconds=20)
    assert planner.next_due(jobs, now) is None, "nothing known before a first offer"
    for spec in jobs.values():
        offer(planner, spec, now)
    assert planner.next_due(jobs, now) == timedelta(seconds=30), "delayed's plan at :50"
    assert planner.next_due({"hourly": hourly}, now) == timedelta(minutes=59, seconds=40)
