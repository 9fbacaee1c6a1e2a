"""Leases and heartbeats: stale leases are stolen or closed; old holders fenced."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest

import pgsched
from tests.integration.conftest import SchedulerFactory
from tests.support.options import LeaseTimes
from tests.support.rows import (
    db_now,
    finish_with_token,
    floor_to,
    make_stale,
    row_by_id,
    rows,
    seed_running,
)
from tests.support.threads import Recorder, run_together, running
from tests.support.waiting import wait_until

DAY = timedelta(days=1)
LONG_LEASE = LeaseTimes(run_timeout="30s", stale_timeout="1h", heartbeat_interval="20m")


def current_day_plan(db: Any) -> Any:
    return floor_to(db_now(db), DAY)


def test_stale_lease_is_stolen_on_the_same_row_and_the_old_holder_is_fenced(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, pg_dsn: str
) -> None:
    plan = current_day_plan(db)
    old = seed_running(db, migrated, "stealable", plan, stale_in=-timedelta(seconds=5))
    recorder = Recorder()
    old_write_during_new_lease: list[object] = []

    s = make_scheduler("thief", max_concurrency=4)

    @s.job(every="1d", max_attempts=3, allow_stale_reentry=True, **LONG_LEASE)
    def stealable(run: pgsched.Run) -> pgsched.Result:
        recorder.enter(run)
        # The old holder tries its terminal write while the new holder runs.
        old_write_during_new_lease.append(
            finish_with_token(pg_dsn, migrated, old["id"], old["lease_token"], "FAILED")
        )
        recorder.leave()
        return pgsched.Result(rows_affected=3, data={"by": "thief"})

    report = s.run_once()
    assert report.stolen == 1
    assert report.claimed == 0
    assert report.succeeded == 1
    (run,) = recorder.runs
    assert old_write_during_new_lease == [{}], "the old holder's write must match no row"

    row = row_by_id(db, migrated, old["id"])
    assert rows(db, migrated) == [row], "a steal must reuse the row"
    assert run.execution_id == old["id"]
    assert run.plan_time == plan
    assert row["attempt"] == run.attempt == 2
    assert row["lease_token"] == run.lease_token != old["lease_token"]
    assert row["fencing_token"] == run.fencing_token > old["fencing_token"]
    assert row["runner_id"] == "thief"
    assert row["status"] == "SUCCESS"
    assert row["result"] == {"by": "thief"}
    assert row["rows_affected"] == 3

    # A late write by the old holder after the new holder finished changes nothing either.
    assert finish_with_token(pg_dsn, migrated, old["id"], old["lease_token"], "FAILED") == {}
    assert row_by_id(db, migrated, old["id"]) == row


def test_old_holders_terminal_write_is_rejected_after_a_steal(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    gates = {name: (threading.Event(), threading.Event()) for name in ("A", "B")}
    seen: dict[str, pgsched.Run] = {}

    def held(run: pgsched.Run) -> pgsched.Result:
        started, release = gates[run.runner_id]
        seen[run.runner_id] = run
        started.set()
        assert release.wait(20), "never released"
        return pgsched.Result(data={"by": run.runner_id})

    # max_concurrency=1: A has no free slot, so it cannot steal its own stale row.
    a = make_scheduler("A", max_concurrency=1)
    b = make_scheduler("B", max_concurrency=1)
    for s in (a, b):
        s.register(
            held, name="held", every="1d", max_attempts=3, allow_stale_reentry=True, **LONG_LEASE
        )

    reports: list[pgsched.TickReport] = []
    thief = threading.Thread(target=lambda: reports.append(b.run_once()), daemon=True)
    try:
        with running(a):
            assert gates["A"][0].wait(10), "A never started the handler"
            (first,) = rows(db, migrated)
            assert (first["status"], first["runner_id"]) == ("RUNNING", "A")
            make_stale(db, migrated, first["id"])

            thief.start()
            assert gates["B"][0].wait(10), "B did not steal the stale lease"
            stolen = row_by_id(db, migrated, first["id"])
            assert (stolen["status"], stolen["runner_id"], stolen["attempt"]) == ("RUNNING", "B", 2)
            assert stolen["lease_token"] == seen["B"].lease_token != first["lease_token"]
            assert seen["B"].fencing_token > seen["A"].fencing_token

            # A's handler finishes now: its terminal write must match no row.
            gates["A"][1].set()
            wait_until(lambda: seen["A"].lease_lost, 10, "A to learn its lease was lost")
            with pytest.raises(pgsched.LeaseLost):
                seen["A"].heartbeat()
            assert row_by_id(db, migrated, first["id"]) == stolen, "A wrote over B's lease"
    finally:
        for _, release in gates.values():
            release.set()
        if thief.ident is not None:
            thief.join(20)

    (report,) = reports
    assert report.stolen == 1 and report.succeeded == 1
    final = row_by_id(db, migrated, first["id"])
    assert (final["status"], final["runner_id"], final["result"]) == ("SUCCESS", "B", {"by": "B"})
    assert len(rows(db, migrated)) == 1


def test_lease_loss_is_signalled_to_a_running_handler(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    a_started, a_done = threading.Event(), threading.Event()
    observed: dict[str, Any] = {}

    async def signalled(run: pgsched.Run) -> pgsched.Result:
        if run.runner_id == "B":
            return pgsched.Result(data={"by": "B"})
        observed["run"] = run
        observed["lost_at_start"] = run.lease_lost
        a_started.set()
        try:
            for _ in range(300):  # up to 15 s
                if run.lease_lost:
                    break
                await asyncio.sleep(0.05)
            observed["lost"] = run.lease_lost
            try:
                run.heartbeat()
                observed["heartbeat"] = "returned"
            except pgsched.LeaseLost:
                observed["heartbeat"] = "LeaseLost"
            return pgsched.Result(data={"by": "A"})
        finally:
            a_done.set()

    options = LeaseTimes(run_timeout="20s", stale_timeout="30s", heartbeat_interval="1s")
    a = make_scheduler("A", max_concurrency=1)
    b = make_scheduler("B", max_concurrency=1)
    for s in (a, b):
        s.register(
            signalled,
            name="signalled",
            every="1d",
            max_attempts=3,
            allow_stale_reentry=True,
            **options,
        )

    with running(a):
        assert a_started.wait(10)
        (row,) = rows(db, migrated)
        assert observed["lost_at_start"] is False

        def steal() -> bool:
            # A heartbeats every second, so it may renew between our update and B's probe.
            make_stale(db, migrated, row["id"])
            return b.run_once().stolen == 1

        wait_until(steal, 15, "B to steal A's lease", interval=0)
        assert a_done.wait(15), "A's handler never finished"

    assert observed["lost"] is True, "run.lease_lost never became true"
    assert observed["heartbeat"] == "LeaseLost"
    final = row_by_id(db, migrated, row["id"])
    assert (final["status"], final["runner_id"], final["attempt"]) == ("SUCCESS", "B", 2)
    assert final["result"] == {"by": "B"}, "the old holder's result must not be written"


def test_stale_lease_without_reentry_becomes_failed(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    old = seed_running(
        db, migrated, "no_reentry", current_day_plan(db), stale_in=-timedelta(seconds=5)
    )
    recorder = Recorder()
    s = make_scheduler()

    @s.job(every="1d", max_attempts=3, allow_stale_reentry=False, **LONG_LEASE)
    def no_reentry(run: pgsched.Run) -> None:
        recorder.enter(run)

    report = s.run_once()
    assert report.closed_stale == 1
    assert report.started == 0
    assert len(recorder) == 0
    row = row_by_id(db, migrated, old["id"])
    assert row["status"] == "FAILED"
    assert row["error_code"] == "stale_timeout"
    assert row["next_retry_at"] is None
    assert row["attempt"] == 1
    assert row["finished_at"] is not None
    # and it stays that way
    assert s.run_once().started == 0
    assert row_by_id(db, migrated, old["id"])["status"] == "FAILED"


def test_stale_lease_with_attempts_exhausted_becomes_failed(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    old = seed_running(
        db,
        migrated,
        "exhausted",
        current_day_plan(db),
        stale_in=-timedelta(seconds=5),
        attempt=3,  # a steal's extra attempt (max_attempts + 1): its holder died too
        max_attempts=2,
    )
    recorder = Recorder()
    s = make_scheduler()

    @s.job(every="1d", max_attempts=2, allow_stale_reentry=True, **LONG_LEASE)
    def exhausted(run: pgsched.Run) -> None:
        recorder.enter(run)

    report = s.run_once()
    assert report.closed_stale == 1
    assert report.started == 0
    assert len(recorder) == 0
    row = row_by_id(db, migrated, old["id"])
    assert (row["status"], row["error_code"], row["attempt"]) == ("FAILED", "stale_timeout", 3)
    assert row["next_retry_at"] is None


@pytest.mark.parametrize("reentry", [False, True])
def test_stale_rows_of_past_plans_are_handled_too(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, reentry: bool
) -> None:
    plan = current_day_plan(db)
    past = [
        seed_running(db, migrated, "past", plan - n * DAY, stale_in=-timedelta(seconds=5))
        for n in (3, 2)
    ]
    recorder = Recorder()
    s = make_scheduler()

    @s.job(
        name="past",
        every="1d",
        max_attempts=3,
        allow_stale_reentry=reentry,
        overlap="allow",
        **LONG_LEASE,
    )
    def past_job(run: pgsched.Run) -> None:
        recorder.enter(run)

    report = s.run_once()
    for old in past:
        row = row_by_id(db, migrated, old["id"])
        if reentry:
            assert (row["status"], row["attempt"], row["runner_id"]) == ("SUCCESS", 2, "r1")
        else:
            assert (row["status"], row["error_code"]) == ("FAILED", "stale_timeout")
            assert row["next_retry_at"] is None
    if reentry:
        assert report.stolen == 2
        assert sorted(r.plan_time for r in recorder.runs) == [plan - 3 * DAY, plan - 2 * DAY, plan]
    else:
        assert report.closed_stale == 2
        assert [r.plan_time for r in recorder.runs] == [plan]
    assert report.claimed == 1, "the current plan is claimed as well"


def test_concurrent_stealers_have_one_winner(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    old = seed_running(
        db, migrated, "contested_steal", current_day_plan(db), stale_in=-timedelta(seconds=5)
    )
    recorder = Recorder()

    def contested_steal(run: pgsched.Run) -> None:
        recorder.enter(run)

    schedulers = [make_scheduler(f"t{i}") for i in range(4)]
    for s in schedulers:
        s.register(
            contested_steal, every="1d", max_attempts=3, allow_stale_reentry=True, **LONG_LEASE
        )
    reports = run_together([s.run_once for s in schedulers])
    assert sum(r.stolen for r in reports) == 1, reports
    assert sum(r.started for r in reports) == 1, reports
    assert len(recorder) == 1
    row = row_by_id(db, migrated, old["id"])
    assert (row["status"], row["attempt"]) == ("SUCCESS", 2)
    assert len(rows(db, migrated)) == 1


def test_heartbeats_extend_the_lease_while_the_handler_runs(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    started, release = threading.Event(), threading.Event()
    beats: list[str] = []

    def beating(run: pgsched.Run) -> None:
        started.set()
        assert release.wait(20)
        try:
            run.heartbeat()
            beats.append("ok")
        except pgsched.LeaseLost:
            beats.append("lost")

    s = make_scheduler()
    s.register(beating, every="1d", run_timeout="15s", stale_timeout="20s", heartbeat_interval="1s")
    reports: list[pgsched.TickReport] = []
    worker = threading.Thread(target=lambda: reports.append(s.run_once()), daemon=True)
    worker.start()
    try:
        assert started.wait(10)
        (first,) = rows(db, migrated)
        assert first["status"] == "RUNNING"

        def renewed() -> bool:
            (now,) = rows(db, migrated)
            return bool(
                now["stale_after"] > first["stale_after"]
                and now["heartbeat_at"] > first["heartbeat_at"]
            )

        # 6 s: guard against an order-of-magnitude regression (a renewal normally comes within
        # the 1 s heartbeat_interval), not a performance claim: those live in bench/
        wait_until(renewed, 6, "a heartbeat to extend stale_after")
        (later,) = rows(db, migrated)
        # stale_after = heartbeat_at + stale_timeout
        assert later["stale_after"] - later["heartbeat_at"] == timedelta(seconds=20)
    finally:
        release.set()
        worker.join(20)
    assert beats == ["ok"]
    assert reports[0].succeeded == 1
    assert rows(db, migrated)[0]["status"] == "SUCCESS"


# -- after a crash: which plans run again, and how often ---------------------------------------


def test_a_transactional_job_with_max_attempts_1_is_run_again_after_its_holder_died(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, pg_dsn: str
) -> None:
    # The holder died (its lease went stale) with nothing committed: the default options of a
    # transactional job run the plan again, though max_attempts=1 leaves no retry.
    old = seed_running(
        db,
        migrated,
        "tx_once",
        current_day_plan(db),
        stale_in=-timedelta(seconds=5),
        max_attempts=1,
        runner_id="dead-one",
    )
    recorder = Recorder()
    s = make_scheduler("thief")

    @s.job(every="1d", transactional=True, **LONG_LEASE)
    def tx_once(run: pgsched.Run) -> int:
        recorder.enter(run)
        recorder.leave()
        return 1

    assert s.jobs["tx_once"].max_attempts == 1
    report = s.run_once()
    assert (report.stolen, report.closed_stale, report.succeeded) == (1, 0, 1)
    (run,) = recorder.runs
    assert (run.attempt, run.max_attempts) == (2, 1)
    row = row_by_id(db, migrated, old["id"])
    assert (row["status"], row["attempt"], row["max_attempts"]) == ("SUCCESS", 2, 1)
    assert row["runner_id"] == "thief"
    # the dead holder's attempt is kept, as for any steal
    history = pgsched.Admin(dsn=pg_dsn, schema=migrated).run(old["id"])
    assert [(a.attempt, a.runner_id, a.status, a.error_code) for a in history.attempts] == [
        (1, "dead-one", "FAILED", "stale_timeout"),
        (2, "thief", "SUCCESS", None),
    ]


def test_a_default_job_whose_holder_died_ends_failed_stale_timeout(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    # Not transactional: its handler may have done its work before the replica died, so the
    # plan is not run again by default, even with attempts left.
    old = seed_running(db, migrated, "plain", current_day_plan(db), stale_in=-timedelta(seconds=5))
    recorder = Recorder()
    s = make_scheduler()

    @s.job(every="1d", max_attempts=3, **LONG_LEASE)
    def plain(run: pgsched.Run) -> None:
        recorder.enter(run)

    report = s.run_once()
    assert (report.closed_stale, report.stolen, report.started) == (1, 0, 0)
    assert len(recorder) == 0
    row = row_by_id(db, migrated, old["id"])
    assert (row["status"], row["error_code"], row["attempt"]) == ("FAILED", "stale_timeout", 1)
    assert row["next_retry_at"] is None
    assert s.run_once().started == 0


@pytest.mark.parametrize(
    ("attempt", "outcome"),
    [
        (2, ("SUCCESS", None, 3)),  # the last attempt's holder died: one steal more
        (3, ("FAILED", "stale_timeout", 3)),  # that one's holder died too: past stealing
    ],
)
def test_a_stale_lease_is_stolen_up_to_one_attempt_past_max_attempts(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, attempt: int, outcome: tuple[Any, ...]
) -> None:
    old = seed_running(
        db,
        migrated,
        "edge",
        current_day_plan(db),
        stale_in=-timedelta(seconds=5),
        attempt=attempt,
        max_attempts=2,
    )
    recorder = Recorder()
    s = make_scheduler()

    @s.job(every="1d", max_attempts=2, transactional=True, **LONG_LEASE)
    def edge(run: pgsched.Run) -> None:
        recorder.enter(run)
        recorder.leave()

    s.run_once()
    row = row_by_id(db, migrated, old["id"])
    assert (row["status"], row["error_code"], row["attempt"]) == outcome
    assert [r.attempt for r in recorder.runs] == ([3] if attempt == 2 else [])


def test_a_plan_whose_holders_die_max_attempts_plus_1_times_in_a_row_ends_stale_timeout(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, pg_dsn: str
) -> None:
    # A poison plan that kills its replica: max_attempts=1, so its first holder's death is
    # survived (a steal) and the second's is not.
    old = seed_running(
        db,
        migrated,
        "poison",
        current_day_plan(db),
        stale_in=-timedelta(seconds=5),
        max_attempts=1,
        runner_id="dead-one",
    )
    entered, release = threading.Event(), threading.Event()
    attempts: list[int] = []

    def poison(run: pgsched.Run) -> None:
        attempts.append(run.attempt)
        entered.set()
        assert release.wait(20), "never released"

    a, b = make_scheduler("A", max_concurrency=1), make_scheduler("B")
    for s in (a, b):
        s.register(poison, every="1d", transactional=True, **LONG_LEASE)
    reports: list[pgsched.TickReport] = []
    thief = threading.Thread(target=lambda: reports.append(a.run_once()), daemon=True)
    thief.start()
    try:
        assert entered.wait(15), "A did not steal the dead holder's lease"
        stolen = row_by_id(db, migrated, old["id"])
        assert (stolen["status"], stolen["runner_id"], stolen["attempt"]) == ("RUNNING", "A", 2)
        make_stale(db, migrated, old["id"])  # A dies too (it will not heartbeat: LONG_LEASE)
        closing = b.run_once()
        assert (closing.closed_stale, closing.stolen, closing.started) == (1, 0, 0)
    finally:
        release.set()
        thief.join(20)
    assert attempts == [2]
    assert reports[0].succeeded == 0  # A's late SUCCESS found its lease gone
    row = row_by_id(db, migrated, old["id"])
    assert (row["status"], row["error_code"], row["attempt"]) == ("FAILED", "stale_timeout", 2)
    assert row["next_retry_at"] is None
    history = pgsched.Admin(dsn=pg_dsn, schema=migrated).run(old["id"])
    assert [(x.attempt, x.runner_id, x.error_code) for x in history.attempts] == [
        (1, "dead-one", "stale_timeout"),
        (2, "A", "stale_timeout"),
    ]


def test_a_handler_failure_is_still_bounded_by_max_attempts(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    # The extra attempt is a steal's only: a steal of the last attempt gives the handler one
    # run more, and a failure of that run is not retried.
    plan = current_day_plan(db)
    crashed = seed_running(
        db,
        migrated,
        "failing",
        plan,
        stale_in=-timedelta(seconds=5),
        attempt=2,  # the last attempt's holder died
        max_attempts=2,
        scope=pgsched.Scope("shard", "crashed"),
    )
    calls: list[tuple[str, int]] = []

    def failing(run: pgsched.Run) -> None:
        calls.append((run.scope.id, run.attempt))
        raise RuntimeError("boom")

    s = make_scheduler()
    s.register(
        failing,
        every="1d",
        scopes=[pgsched.Scope("shard", "crashed"), pgsched.Scope("shard", "fresh")],
        max_attempts=2,
        retry_backoff=[0],
        transactional=True,
        overlap="allow",
        **LONG_LEASE,
    )
    for _ in range(4):  # more ticks than any retry needs
        s.run_once()
    assert sorted(calls) == [("crashed", 3), ("fresh", 1), ("fresh", 2)]
    final = {r["scope_id"]: r for r in rows(db, migrated, "failing")}
    assert final["crashed"]["id"] == crashed["id"]
    for scope, attempt in (("crashed", 3), ("fresh", 2)):
        row = final[scope]
        assert (row["status"], row["error_code"], row["attempt"]) == (
            "FAILED",
            "handler_error",
            attempt,
        ), scope
        assert row["next_retry_at"] is None, scope


def _crashed_then_failing(
    make_scheduler: SchedulerFactory,
    migrated: str,
    db: Any,
    name: str,
    max_attempts: int,
    transactional: bool,
) -> tuple[dict[str, Any], list[tuple[str, int, int]], pgsched.Scheduler]:
    """A plan whose first holder died (scope crashed) and one no replica held (scope fresh),
    of a job whose handler always fails, retried at once."""
    crashed = seed_running(
        db,
        migrated,
        name,
        current_day_plan(db),
        stale_in=-timedelta(seconds=5),
        max_attempts=max_attempts,
        scope=pgsched.Scope("shard", "crashed"),
    )
    calls: list[tuple[str, int, int]] = []

    def failing(run: pgsched.Run) -> None:
        calls.append((run.scope.id, run.attempt, run.max_attempts))
        raise RuntimeError("boom")

    s = make_scheduler()
    s.register(
        failing,
        name=name,
        every="1d",
        scopes=[pgsched.Scope("shard", "crashed"), pgsched.Scope("shard", "fresh")],
        max_attempts=max_attempts,
        retry_backoff=[0],
        transactional=transactional,
        allow_stale_reentry=True,
        overlap="allow",
        **LONG_LEASE,
    )
    for _ in range(max_attempts + 3):  # more ticks than any retry needs
        s.run_once()
    return crashed, calls, s


def test_a_crash_does_not_use_up_one_of_the_handlers_retries(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    # max_attempts=3: the first holder died, so the steal's attempt (2) is the crash's and the
    # handler still has its three runs (2, 3, 4); a plan no crash touched fails at 3.
    crashed, calls, _ = _crashed_then_failing(make_scheduler, migrated, db, "crashy", 3, False)
    assert [(a, m) for scope, a, m in calls if scope == "crashed"] == [(2, 3), (3, 3), (4, 3)]
    assert [a for scope, a, _ in calls if scope == "fresh"] == [1, 2, 3]
    final = {r["scope_id"]: r for r in rows(db, migrated, "crashy")}
    assert final["crashed"]["id"] == crashed["id"]
    for scope, attempt, stolen in (("crashed", 4, True), ("fresh", 3, False)):
        row = final[scope]
        assert (row["status"], row["error_code"], row["attempt"], row["stolen"]) == (
            "FAILED",
            "handler_error",
            attempt,
            stolen,
        ), scope
        assert row["next_retry_at"] is None, scope


def test_a_transactional_max_attempts_1_crash_then_a_handler_failure_ends_at_attempt_2(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, pg_dsn: str
) -> None:
    crashed, calls, _ = _crashed_then_failing(make_scheduler, migrated, db, "once", 1, True)
    assert sorted(calls) == [("crashed", 2, 1), ("fresh", 1, 1)]
    row = row_by_id(db, migrated, crashed["id"])
    assert (row["status"], row["error_code"], row["attempt"], row["stolen"]) == (
        "FAILED",
        "handler_error",
        2,
        True,
    )
    assert row["next_retry_at"] is None


def test_retry_now_gives_a_stolen_row_with_no_attempt_left_exactly_one_more(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, pg_dsn: str
) -> None:
    # pgsched retry's "one more attempt if it had none left" counts the steal's extra attempt:
    # a stolen row FAILED at attempt 4 of 3 runs once more (5), not twice.
    crashed, calls, s = _crashed_then_failing(make_scheduler, migrated, db, "again", 3, False)
    assert row_by_id(db, migrated, crashed["id"])["attempt"] == 4
    pgsched.Admin(dsn=pg_dsn, schema=migrated).retry_now(crashed["id"])
    for _ in range(3):
        s.run_once()
    assert [a for scope, a, _ in calls if scope == "crashed"] == [2, 3, 4, 5]
    row = row_by_id(db, migrated, crashed["id"])
    assert (row["status"], row["attempt"], row["next_retry_at"]) == ("FAILED", 5, None)
