"""A consumer's run of the task an execution sent kept as an attempt of it
(``Admin.record_task_attempt``, what ``pgsched.celery.track`` calls in a worker), through the
runtime role a worker would use."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest
from psycopg import sql

import pgsched
from pgsched._facades.admin import Admin
from pgsched._records import RecordedTask, TaskAttempt
from tests.support.rows import db_now, insert_row, table


@pytest.fixture
def admin(runtime_dsn: str, migrated: str) -> Any:
    with Admin(dsn=runtime_dsn, schema=migrated) as admin:
        yield admin


def _sent(db: Any, schema: str) -> uuid.UUID:
    now = db_now(db)
    row = insert_row(
        db,
        schema,
        job_name="celery:e",
        plan_time=now,
        status="SUCCESS",
        started_at=now,
        finished_at=now,
        runner_id="beat-1",
    )
    return uuid.UUID(str(row["id"]))


def test_runs_are_numbered_after_the_publish_and_shown_in_order(
    admin: Admin, db: Any, migrated: str
) -> None:
    execution = _sent(db, migrated)
    failed = TaskAttempt(
        "celery@w1", 0.25, "FAILED", "task_retried", "Retry: in 1s", "tb", final=False
    )
    first = admin.record_task_attempt(execution, failed)
    assert first is not None and first.attempt == 2
    second = admin.record_task_attempt(str(execution), TaskAttempt("celery@w2", 0.5, "SUCCESS"))
    assert second is not None and second.attempt == 3
    # A success of a row its publish made SUCCESS writes nothing more to the row.
    assert (second.execution_status, second.changed) == ("SUCCESS", False)
    attempts = admin.run(execution).attempts
    assert [(a.attempt, a.runner_id, a.status, a.error_code) for a in attempts] == [
        (1, "beat-1", "SUCCESS", None),
        (2, "celery@w1", "FAILED", "task_retried"),
        (3, "celery@w2", "SUCCESS", None),
    ]
    ran = attempts[2]
    assert ran.started_at is not None and ran.finished_at is not None
    assert (
        0.4 <= (ran.finished_at - ran.started_at).total_seconds() < 5
    )  # its elapsed, dated by the database
    # The recent failures list the failed run only.
    assert [(f.attempt, f.error_code) for f in admin.failed_attempts(10)] == [(2, "task_retried")]


def test_a_long_traceback_keeps_its_end(admin: Admin, db: Any, migrated: str) -> None:
    execution = _sent(db, migrated)
    traceback = "Traceback (most recent call last):\n" + "  frame é\n" * 5000 + "ValueError: end"
    admin.record_task_attempt(
        execution, TaskAttempt("celery@w", 0, "FAILED", "task_failed", "ValueError: end", traceback)
    )
    kept = admin.run(execution).attempts[-1].traceback
    assert kept is not None and kept.endswith("ValueError: end")
    assert len(kept.encode()) <= 16384


def test_an_unknown_execution_records_nothing_and_bad_input_is_refused(admin: Admin) -> None:
    assert admin.record_task_attempt(uuid.uuid4(), TaskAttempt("celery@w", 0, "SUCCESS")) is None
    with pytest.raises(pgsched.ConfigError, match="is not a UUID"):
        admin.record_task_attempt("nope", TaskAttempt("celery@w", 0, "SUCCESS"))
    with pytest.raises(pgsched.ConfigError, match="status='DONE' must be SUCCESS or FAILED"):
        admin.record_task_attempt(uuid.uuid4(), TaskAttempt("celery@w", 0, "DONE"))


def _known(db: Any, schema: str, job: str = "celery:e") -> None:
    """A job_state row, as a beat registering the entry writes it: `status` lists the job."""
    db.execute(
        sql.SQL("INSERT INTO {} (job_name) VALUES (%s)").format(table(schema, "job_state")), (job,)
    )


def _status(admin: Admin, job: str = "celery:e") -> Any:
    return next(s for s in admin.status() if s.job == job)


def test_the_final_outcome_is_the_executions_status_a_retry_is_not(
    admin: Admin, db: Any, migrated: str
) -> None:
    _known(db, migrated)
    execution = _sent(db, migrated)
    retried = TaskAttempt("celery@w", 0, "FAILED", "task_retried", "Retry in 1s", final=False)
    recorded = admin.record_task_attempt(execution, retried)
    assert recorded == RecordedTask(2, "SUCCESS", False)  # a retry is not an outcome
    assert [a.status for a in admin.run(execution).attempts] == ["SUCCESS", "FAILED"]
    failed = TaskAttempt("celery@w", 0.1, "FAILED", "task_failed", "ValueError: no", "tb")
    assert admin.record_task_attempt(execution, failed) == RecordedTask(3, "FAILED", True)
    run = admin.run(execution)
    row = run.execution
    assert (row.status, row.error_code, row.error_msg) == (
        "FAILED",
        "task_failed",
        "ValueError: no",
    )
    assert row.next_retry_at is None  # never sent again: the gauge counts it as final
    # The publish stays the beat's success; the worker's runs follow it.
    assert [(a.attempt, a.runner_id, a.status, a.error_code) for a in run.attempts] == [
        (1, "beat-1", "SUCCESS", None),
        (2, "celery@w", "FAILED", "task_retried"),
        (3, "celery@w", "FAILED", "task_failed"),
    ]
    assert _status(admin).failed == 1
    assert _status(admin).last_success is None
    # The recent failures list each failed run once (not the row again as its own).
    assert sorted((f.attempt, f.error_code) for f in admin.failed_attempts(10)) == [
        (2, "task_retried"),
        (3, "task_failed"),
    ]
    # A later run that succeeds (a Celery retry of it) makes it SUCCESS again.
    assert admin.record_task_attempt(execution, TaskAttempt("celery@w", 0, "SUCCESS")) == (
        RecordedTask(4, "SUCCESS", True)
    )
    row = admin.run(execution).execution
    assert (row.status, row.error_code, row.error_msg) == ("SUCCESS", None, None)
    assert _status(admin).failed == 0
    assert _status(admin).last_success is not None


def test_only_a_celery_jobs_row_its_publish_made_success_follows_the_outcome(
    admin: Admin, db: Any, migrated: str
) -> None:
    now = db_now(db)
    failure = TaskAttempt("celery@w", 0, "FAILED", "task_failed", "ValueError: no")
    # A job that is not a beat's: the attempt is kept, its status is its own.
    other = insert_row(
        db,
        migrated,
        job_name="code",
        plan_time=now,
        status="SUCCESS",
        started_at=now,
        finished_at=now,
        runner_id="r",
    )
    assert admin.record_task_attempt(other["id"], failure) == RecordedTask(2, "SUCCESS", False)
    # A publish that failed and awaits its retry: that retry's publish decides.
    retrying = insert_row(
        db,
        migrated,
        job_name="celery:e",
        plan_time=now,
        status="FAILED",
        error_code="handler_error",
        error_msg="broker down",
        max_attempts=3,
        next_retry_at=now + timedelta(minutes=1),
        started_at=now,
        finished_at=now,
        runner_id="beat-1",
    )
    assert admin.record_task_attempt(retrying["id"], failure) == RecordedTask(2, "FAILED", False)
    row = admin.run(retrying["id"]).execution
    assert (row.error_code, row.next_retry_at is not None) == ("handler_error", True)
    # A row still RUNNING (the worker ran the task before the beat wrote the publish): left
    # as it is, then settled once the publish is written.
    publishing = insert_row(
        db,
        migrated,
        job_name="celery:e",
        plan_time=now - timedelta(seconds=1),
        status="RUNNING",
        started_at=now,
        runner_id="beat-1",
        stale_after=now + timedelta(minutes=1),
    )
    assert admin.record_task_attempt(publishing["id"], failure) == RecordedTask(2, "RUNNING", False)
    assert admin.settle_task(publishing["id"]) == RecordedTask(None, "RUNNING", False)
    db.execute(
        sql.SQL("UPDATE {} SET status = 'SUCCESS', finished_at = now() WHERE id = %s").format(
            table(migrated)
        ),
        (publishing["id"],),
    )
    assert admin.settle_task(publishing["id"]) == RecordedTask(None, "FAILED", True)
    run = admin.run(publishing["id"])
    assert (run.execution.status, run.execution.error_code) == ("FAILED", "task_failed")
    assert [(a.attempt, a.status) for a in run.attempts] == [(1, "SUCCESS"), (2, "FAILED")]
    assert admin.settle_task(uuid.uuid4()) is None


def test_a_schedule_of_the_dynamic_job_celery_follows_the_outcome_too(
    admin: Admin, db: Any, migrated: str
) -> None:
    """The dynamic job ``celery`` (Celery tasks put as schedules) sends through the same
    publish as the beat_schedule entries, so its executions follow the worker's outcome."""
    now = db_now(db)
    row = insert_row(
        db,
        migrated,
        job_name="celery",
        scope_kind="tenant",
        scope_id="7",
        plan_time=now,
        status="SUCCESS",
        started_at=now,
        finished_at=now,
        runner_id="beat-1",
    )
    failure = TaskAttempt("celery@w", 0, "FAILED", "task_failed", "ValueError: no")
    assert admin.record_task_attempt(row["id"], failure) == RecordedTask(2, "FAILED", True)
    assert admin.run(row["id"]).execution.error_code == "task_failed"


def test_previous_task_is_the_scopes_last_sent_plan_and_says_whether_it_ran(
    admin: Admin, db: Any, migrated: str
) -> None:
    now = db_now(db)
    scope = pgsched.Scope("t", "1")

    def row(plan: datetime, **cols: Any) -> uuid.UUID:
        cols = {"status": "SUCCESS", "started_at": now, "finished_at": now, **cols}
        got = insert_row(
            db,
            migrated,
            job_name="celery:e",
            scope_kind="t",
            scope_id="1",
            plan_time=plan,
            runner_id="beat-1",
            **cols,
        )
        return uuid.UUID(str(got["id"]))

    assert admin.previous_task("celery:e", scope, now, 60) is None
    sent = row(now - timedelta(minutes=2))
    row(now - timedelta(minutes=1), status="FAILED", error_code="handler_error")  # not sent
    insert_row(
        db,
        migrated,
        job_name="celery:e",
        scope_kind="t",
        scope_id="2",
        plan_time=now - timedelta(seconds=30),
        status="SUCCESS",
    )  # another scope
    previous = admin.previous_task("celery:e", scope, now, 60)
    assert previous is not None
    assert (previous.execution_id, previous.outcome) == (sent, False)
    assert 50 < previous.left_s <= 60
    late = admin.previous_task("celery:e", scope, now, 0)
    assert late is not None and late.left_s < 0  # past the time its task may take: lost
    # A retry in the worker is not an outcome; a success or a failure is.
    admin.record_task_attempt(
        sent, TaskAttempt("celery@w", 0, "FAILED", "task_retried", final=False)
    )
    assert admin.previous_task("celery:e", scope, now, 60).outcome is False  # type: ignore[union-attr]
    admin.record_task_attempt(sent, TaskAttempt("celery@w", 0, "FAILED", "task_failed", "x"))
    failed = admin.previous_task("celery:e", scope, now, 60)
    assert failed is not None and (failed.execution_id, failed.outcome) == (sent, True)
    # Its own plan and later ones are not "previous".
    assert admin.previous_task("celery:e", scope, now - timedelta(minutes=2), 60) is None
