"""The order a replica claims its jobs in: higher priority first, and within a priority the
jobs in name order from a start of the replica's own (spaced by its rank among the live
replicas), so replicas woken for the same plans of many jobs begin on different ones."""

from __future__ import annotations

import pgsched
from pgsched._engine.claims import Claimer
from pgsched._engine.recorder import Recorder
from pgsched._engine.transactions import ClaimTransactions
from pgsched._telemetry.metrics import Metrics


def _jobs() -> list[pgsched.JobSpec]:
    scheduler = pgsched.Scheduler(dsn="postgresql://localhost/x")
    specs = [scheduler.register(lambda run: None, name=f"e{i:03}", every="5s") for i in range(60)]
    specs.append(scheduler.register(lambda run: None, name="urgent", every="5s", priority=5))
    return specs


def _order(runner: str, jobs: list[pgsched.JobSpec], replicas: tuple[str, ...] = ()) -> list[str]:
    claimer = Claimer(ClaimTransactions("pgsched", runner, Recorder(Metrics(), runner)))
    return [job.name for job in claimer.order(reversed(jobs), replicas)]


def test_each_job_once_higher_priority_first_then_a_rotation_of_the_name_order() -> None:
    jobs = _jobs()
    names = sorted(job.name for job in jobs if job.name != "urgent")
    for runner in ("host-a-1", "host-b-2", "host-c-3"):
        order = _order(runner, jobs)
        assert order[0] == "urgent"
        rest = order[1:]
        start = names.index(rest[0])
        assert rest == names[start:] + names[:start]
        assert _order(runner, jobs) == order  # the same every tick


def test_replicas_start_on_different_jobs() -> None:
    jobs = _jobs()
    starts = {_order(f"beat-{pid}", jobs)[1] for pid in range(100, 110)}
    assert len(starts) > 5


def test_live_replicas_start_a_share_apart_by_their_rank() -> None:
    jobs = _jobs()
    live = ("beat-a", "beat-b", "beat-c")
    starts = [_order(runner, jobs, live)[1] for runner in live]
    assert starts == ["e000", "e020", "e040"]  # 60 jobs of one priority, thirds
    # one not among them yet (it has not registered) starts at its runner id's place
    assert _order("beat-d", jobs, live) == _order("beat-d", jobs)
