"""The dynamic job ``celery`` on real beats and a real worker: schedules put as data while the
beats run are sent once per plan, with the schedule's scope in the headers; pause and delete
stop them; a task imported from django-celery-beat's tables is sent and run."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime
from typing import Any

import psycopg
from psycopg import sql

import pgsched
from tests.acceptance.celery.conftest import CeleryRig
from tests.support.django_beat import django_beat_tables, source_dsn
from tests.support.replica import clean_env
from tests.support.rows import db_now
from tests.support.waiting import wait_until

Conn = psycopg.Connection[Any]
Scope = pgsched.Scope
CELERY = "celery"


def _rows(db: Conn, schema: str) -> list[tuple[Any, ...]]:
    query = sql.SQL(
        "SELECT id, scope_kind || ':' || scope_id, plan_time, status"
        " FROM {}.cron_executions WHERE job_name = 'celery' ORDER BY plan_time, scope_id"
    ).format(sql.Identifier(schema))
    return db.execute(query).fetchall()


def _registered(admin: pgsched.Admin) -> bool:
    try:
        return any(j.job == CELERY and j.schedule == "dynamic" for j in admin.status())
    except pgsched.PgschedError:  # the first beat is still migrating
        return False


def _task(entry: str) -> dict[str, Any]:
    return {"task": "tests.record", "args": [entry], "options": {"headers": {"x": "1"}}}


def _sent(rig: CeleryRig, entry: str, after: datetime | None = None) -> list[dict[str, Any]]:
    return [
        r
        for r in rig.records()
        if r["entry"] == entry and (after is None or datetime.fromisoformat(r["plan_time"]) > after)
    ]


def test_schedules_put_while_beats_run_are_sent_once_per_plan_until_paused_or_deleted(
    db: Conn, any_rig: CeleryRig
) -> None:
    rig = any_rig
    rig.migrate()
    rig.worker()
    beats = [rig.beat(f"beat{i}", {}) for i in range(2)]
    rig.wait_started(*beats)
    admin = pgsched.Admin(rig.dsn, schema=rig.schema)
    wait_until(lambda: _registered(admin), 60, "a beat to register the dynamic job celery")
    admin.put_schedule(CELERY, Scope("tenant", "7"), every="2s", payload=_task("t7"))
    admin.put_schedule(CELERY, Scope("tenant", "8"), every="2s", payload=_task("t8"))
    wait_until(lambda: len(_sent(rig, "t7")) >= 2 and len(_sent(rig, "t8")) >= 2, 40, "sent")

    admin.pause_schedule(CELERY, Scope("tenant", "7"))
    paused_at = db_now(db)
    wait_until(lambda: len(_sent(rig, "t8", paused_at)) >= 3, 40, "t8 sent after the pause")
    assert not [r for r in _rows(db, rig.schema) if r[1] == "tenant:7" and r[2] > paused_at]

    admin.resume_schedule(CELERY, Scope("tenant", "7"))
    assert admin.delete_schedule(CELERY, Scope("tenant", "8"))
    deleted_at = db_now(db)
    wait_until(lambda: len(_sent(rig, "t7", deleted_at)) >= 3, 40, "t7 sent after the resume")
    assert not [r for r in _rows(db, rig.schema) if r[1] == "tenant:8" and r[2] > deleted_at]

    for beat in beats:
        assert beat.stop() == 0, beat.output()[-3000:]
    rows = _rows(db, rig.schema)
    wait_until(
        lambda: {r["task_id"] for r in rig.records()} >= {str(r[0]) for r in rows},
        20,
        "the worker to run every task sent",
    )
    sent = rig.records()
    # Each plan of each schedule once, its task id the execution id, its scope in the headers.
    assert len({r["task_id"] for r in sent}) == len(sent), sent
    assert all(r[3] == "SUCCESS" for r in rows), rows
    by_id = {str(r[0]): r for r in rows}
    for record in sent:
        row = by_id[record["task_id"]]
        assert record["execution_id"] == record["task_id"]
        assert record["scope"] == row[1] == {"t7": "tenant:7", "t8": "tenant:8"}[record["entry"]]
        assert datetime.fromisoformat(record["plan_time"]) == row[2]
    assert len(rows) == len(sent)


def test_a_task_imported_from_django_celery_beat_is_sent_and_run(
    db: Conn, redis_rig: CeleryRig, pg_dsn: str
) -> None:
    rig = redis_rig
    rig.migrate()
    rig.worker()
    rig.wait_started(rig.beat("beat", {}))
    admin = pgsched.Admin(rig.dsn, schema=rig.schema)
    with django_beat_tables(pg_dsn, f"{rig.schema}_dj") as m:
        every_2s = m.IntervalSchedule.objects.create(every=2, period="seconds")
        m.PeriodicTask.objects.create(
            name="imported", task="tests.record", interval=every_2s, args='["imported"]'
        )
        wait_until(lambda: _registered(admin), 60, "the beat to register the dynamic job celery")
        source = source_dsn(pg_dsn, f"{rig.schema}_dj")
        command = ["celery", "import-django-celery-beat", "--from-dsn", source]
        done = subprocess.run(
            [sys.executable, "-m", "pgsched", "--dsn", rig.dsn, "--schema", rig.schema, *command],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0] == "imported  imported: every 2s -> tests.record"
    wait_until(lambda: len(_sent(rig, "imported")) >= 2, 40, "the imported task run twice")
    record = _sent(rig, "imported")[0]
    assert record["scope"] == "periodic_task:imported"
    rows = {str(r[0]): r for r in _rows(db, rig.schema)}
    assert rows[record["task_id"]][1] == "periodic_task:imported"
