"""``pgsched.celery.track(app)`` in a real worker: each run of a task a beat sent is kept as an
attempt of its execution, its success, or its failure with the traceback."""

from __future__ import annotations

from typing import Any

import pgsched
from tests.acceptance.celery.conftest import CeleryRig
from tests.support.waiting import wait_until


def test_the_workers_outcome_is_an_attempt_of_the_execution(redis_rig: CeleryRig) -> None:
    rig = redis_rig
    schedule = {"ok": {"every": 2}, "bad": {"every": 2, "task": "tests.fail"}}
    # The worker tracks; the beat, started from the same app module, does not need to.
    worker_env = rig.env({}, CELERY_TEST_TRACK="1")
    rig.worker(env=worker_env)
    beat = rig.beat("beat", schedule)
    admin = pgsched.Admin(dsn=rig.dsn, schema=rig.schema)
    try:

        def run_of(entry: str) -> Any:
            for record in rig.records():
                if record["entry"] == entry:
                    run = admin.run(record["task_id"])
                    if len(run.attempts) >= 2:
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
