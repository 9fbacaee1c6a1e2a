"""A consumer's run of the task an execution sent kept as an attempt of it
(``Admin.record_task_attempt``, what ``pgsched.celery.track`` calls in a worker), through the
runtime role a worker would use."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import pgsched
from pgsched._admin import Admin
from pgsched._records import TaskAttempt
from tests.support.rows import db_now, insert_row


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
    failed = TaskAttempt("celery@w1", 0.25, "FAILED", "task_retried", "Retry: in 1s", "tb")
    assert admin.record_task_attempt(execution, failed) == 2
    assert admin.record_task_attempt(str(execution), TaskAttempt("celery@w2", 0.5, "SUCCESS")) == 3
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
