"""``pgsched.celery.track(app)`` in a real worker: each run of a task a beat sent is kept as an
attempt of its execution, its success, or its failure with the traceback."""

from __future__ import annotations

import functools
import itertools
from typing import Any

import pgsched
from tests.acceptance.celery.conftest import CeleryRig
from tests.support.net import free_port, http
from tests.support.waiting import wait_until


def test_the_workers_outcome_is_an_attempt_of_the_execution(redis_rig: CeleryRig) -> None:
    rig = redis_rig
    schedule = {"ok": {"every": 2}, "bad": {"every": 2, "task": "tests.fail"}}
    # The worker tracks; the beat, started from the same app module, does not need to.
    worker_env = rig.env({}, CELERY_TEST_TRACK="1")
    rig.migrate()
    rig.worker(env=worker_env)
    beat = rig.beat("beat", schedule)
    rig.wait_started(beat)
    admin = pgsched.Admin(dsn=rig.dsn, schema=rig.schema)
    try:

        def run_of(entry: str) -> Any:
            """A run of ``entry`` with the worker's attempt and the beat's publish both
            written: the worker may record its run before the beat's SUCCESS row lands (the
            replica writes terminal rows a moment after the broker confirms, many at once)."""
            for record in rig.records():
                if record["entry"] == entry:
                    run = admin.run(record["task_id"])
                    if len(run.attempts) >= 2 and run.attempts[0].status != "RUNNING":
                        return run
            return None

        bad = wait_until(lambda: run_of("bad"), 40, "a failed task's attempt recorded")
        ok = wait_until(lambda: run_of("ok"), 40, "a task's success recorded")
        failures = admin.failed_attempts(50)
    finally:
        admin.close()
    assert beat.stop() == 0, beat.output()[-3000:]
    sent, ran = bad.attempts
    assert (sent.attempt, sent.status) == (1, "SUCCESS")  # the beat's publish
    assert (ran.attempt, ran.status, ran.error_code) == (2, "FAILED", "task_failed")
    assert ran.runner_id is not None and ran.runner_id.startswith("celery@")
    assert ran.error_msg == "ValueError: bad failed on purpose"
    assert ran.traceback is not None and "raise ValueError" in ran.traceback
    assert ran.started_at is not None and ran.finished_at is not None
    assert ran.started_at <= ran.finished_at
    assert [(a.attempt, a.status, a.error_code) for a in ok.attempts] == [
        (1, "SUCCESS", None),
        (2, "SUCCESS", None),
    ]
    # The dashboard's recent failures hold the worker's failure, not its successes.
    assert {f.execution_id for f in failures if f.error_code == "task_failed"} >= {bad.execution.id}
    assert all(f.error_code == "task_failed" for f in failures), failures


def _gauge(metrics: str, name: str, job: str) -> float | None:
    for line in metrics.splitlines():
        if line.startswith(f"{name}{{") and f'job="{job}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def test_the_workers_final_outcome_is_the_executions_status(redis_rig: CeleryRig) -> None:
    rig = redis_rig
    schedule = {
        "bad": {"every": 2, "task": "tests.fail"},
        "flaky": {"every": 2, "task": "tests.flaky"},
    }
    rig.migrate()
    rig.worker(env=rig.env({}, CELERY_TEST_TRACK="1"))
    port = free_port()
    beat = rig.beat("beat", schedule, CELERY_TEST_HTTP_PORT=str(port))
    rig.wait_started(beat)
    admin = pgsched.Admin(dsn=rig.dsn, schema=rig.schema)
    try:

        def executions(entry: str, count: int) -> list[str]:
            ids = list(dict.fromkeys(r["task_id"] for r in rig.records() if r["entry"] == entry))
            return ids[:count] if len(ids) >= count else []

        bad_ids = wait_until(lambda: executions("bad", 2), 40, "two failing tasks run")
        flaky_id = wait_until(lambda: executions("flaky", 1), 40, "a flaky task run")[0]

        def ended(ident: str, status: str) -> Any:
            run = admin.run(ident)
            return run if run.execution.status == status else None

        # Each failed in the worker: FAILED, whether its outcome came before or after the
        # beat wrote its publish (a task of milliseconds often ends first).
        bad = [
            wait_until(functools.partial(ended, i, "FAILED"), 40, f"{i} FAILED") for i in bad_ids
        ]

        def retried_then_succeeded() -> Any:
            run = admin.run(flaky_id)
            outcomes = [(a.status, a.error_code) for a in run.attempts[1:]]
            done = outcomes == [("FAILED", "task_retried"), ("SUCCESS", None)]
            return run if done and run.execution.status == "SUCCESS" else None

        flaky = wait_until(retried_then_succeeded, 40, "the retried task SUCCESS")
        failed = wait_until(
            lambda: (
                (s := next(j for j in admin.status() if j.job == "celery:bad")).failed >= 2 and s
            ),
            20,
            "status counting the failed runs",
        )
        metrics = wait_until(
            lambda: (
                (m := http("GET", f"http://127.0.0.1:{port}/metrics").text)
                and (_gauge(m, "pgsched_failed_runs", "celery:bad") or 0) >= 2
                and m
            ),
            30,
            "pgsched_failed_runs counting the worker's failures",
        )
    finally:
        admin.close()
    assert beat.stop() == 0, beat.output()[-3000:]
    for run in bad:
        row = run.execution
        assert (row.error_code, row.error_msg) == (
            "task_failed",
            "ValueError: bad failed on purpose",
        )
        assert row.next_retry_at is None  # never sent again
        assert [(a.attempt, a.status) for a in run.attempts] == [(1, "SUCCESS"), (2, "FAILED")]
        assert run.attempts[0].runner_id is not None
        assert not run.attempts[0].runner_id.startswith("celery@")  # the beat's publish
    # Sent once: Celery's retry ran it again, pgsched did not send it again.
    assert [r["retries"] for r in rig.records() if r["task_id"] == flaky_id] == [0, 1]
    assert flaky.execution.error_code is None
    assert failed.failed >= 2
    assert _gauge(metrics, "pgsched_failed_runs", "celery:flaky") == 0
    assert _gauge(metrics, "pgsched_last_success_timestamp_seconds", "celery:flaky") is not None


def test_overlap_forbid_sends_a_plan_once_the_previous_task_has_its_outcome(
    redis_rig: CeleryRig,
) -> None:
    rig = redis_rig
    # Tasks of 3 s every second, two workers: without the wait, tasks would run at once.
    forbid = {"overlap": "forbid", "run_timeout": "60s"}
    schedule = {"slow": {"every": 1, "task": "tests.slow", "pgsched": forbid}}
    worker_env = rig.env({}, CELERY_TEST_TRACK="1", CELERY_TEST_SLOW_S="3")
    rig.migrate()
    rig.worker("worker-1", env=worker_env)
    rig.worker("worker-2", env=worker_env)
    beat = rig.beat("beat", schedule, CELERY_TEST_TRACK="1")
    rig.wait_started(beat)
    admin = pgsched.Admin(dsn=rig.dsn, schema=rig.schema)
    try:
        wait_until(
            lambda: sum(1 for r in rig.records() if r.get("end")) >= 3, 60, "three tasks ended"
        )
        records = rig.records()
        runs = [admin.run(r["task_id"]) for r in records if r.get("end")][:3]
    finally:
        admin.close()
    assert beat.stop() == 0, beat.output()[-3000:]
    # The workers' log: each task started after the one before ended, never two at once.
    events = [("end" if r.get("end") else "start", r["task_id"]) for r in records]
    running: list[str] = []
    for kind, task_id in events:
        if kind == "start":
            assert not running, f"{task_id} started while {running} ran: {events}"
            running.append(task_id)
        else:
            assert running == [task_id], events
            running.clear()
    assert "celery_waiting_for_previous_task" in beat.output()
    # The ledger: each plan was sent after the previous plan's outcome was recorded.
    for before, after in itertools.pairwise(runs):
        outcome = before.attempts[-1]
        publish = after.attempts[0]
        assert outcome.status == "SUCCESS" and (outcome.runner_id or "").startswith("celery@")
        assert outcome.finished_at is not None and publish.finished_at is not None
        assert publish.finished_at >= outcome.finished_at, (before, after)
        assert before.execution.plan_time < after.execution.plan_time
