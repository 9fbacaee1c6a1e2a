"""``pgsched celery import-django-celery-beat`` as a real ``pgsched`` subprocess, against
django-celery-beat's tables made by its own migrations (in a schema of the test's own) and
rows written through its Django ORM: what is copied into schedules of the dynamic job
``celery``, what is skipped and why, re-runs that update and never duplicate, the originals
left alone."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from types import ModuleType
from typing import Any

import pytest

import pgsched
from tests.support.django_beat import django_beat_tables, source_dsn
from tests.support.replica import clean_env
from tests.support.rows import db_now

CELERY = "celery"


@pytest.fixture
def beat_models(pg_dsn: str, schema: str) -> Iterator[ModuleType]:
    with django_beat_tables(pg_dsn, f"{schema}_dj") as models:
        yield models


@pytest.fixture
def registered(make_scheduler: Any, migrated: str) -> str:
    """The dynamic job ``celery`` recorded in job_state, as a beat's first tick records it."""
    s = make_scheduler("beat")
    s.register(lambda run: None, name=CELERY, dynamic=True)
    s.run_once()
    return migrated


def pgsched_cli(*args: str, dsn: str, schema: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgsched", "--dsn", dsn, "--schema", schema, *args],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def _tasks(m: ModuleType, now: datetime) -> None:
    every_30s = m.IntervalSchedule.objects.create(every=30, period="seconds")
    m.PeriodicTask.objects.create(
        name="poll",
        task="proj.tasks.poll",
        interval=every_30s,
        args=json.dumps([1, "a"]),
        kwargs=json.dumps({"full": True}),
        queue="fast",
        routing_key="fast.poll",
        priority=4,
        headers=json.dumps({"tenant": "7"}),
        expire_seconds=20,
        description="polls the feed",
    )
    nightly = m.CrontabSchedule.objects.create(
        minute="30", hour="2", day_of_week="1-5", timezone="Europe/Berlin"
    )
    m.PeriodicTask.objects.create(
        name="nightly", task="proj.tasks.report", crontab=nightly, start_time=now + timedelta(1)
    )
    at = m.ClockedSchedule.objects.create(clocked_time=now + timedelta(hours=2))
    m.PeriodicTask.objects.create(name="once", task="proj.tasks.once", clocked=at, one_off=True)
    sun = m.SolarSchedule.objects.create(event="sunrise", latitude=52.5, longitude=13.4)
    m.PeriodicTask.objects.create(name="dawn", task="proj.tasks.dawn", solar=sun)
    m.PeriodicTask.objects.create(
        name="off", task="proj.tasks.off", interval=every_30s, enabled=False
    )
    both = m.CrontabSchedule.objects.create(minute="0", hour="9", day_of_month="1", day_of_week="1")
    m.PeriodicTask.objects.create(name="both-days", task="proj.tasks.x", crontab=both)


def test_enabled_tasks_are_copied_the_rest_skipped_with_why(
    beat_models: ModuleType, registered: str, runtime_dsn: str, pg_dsn: str, schema: str, db: Any
) -> None:
    now = db_now(db)
    _tasks(beat_models, now)
    source = source_dsn(pg_dsn, f"{schema}_dj")
    done = pgsched_cli(
        "celery", "import-django-celery-beat", "--from-dsn", source, dsn=runtime_dsn, schema=schema
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        "skipped   both-days: crontab '0 9 1 * 1' restricts both day_of_month and day_of_week"
        " (Celery: days matching both; cron: days matching either)",
        "skipped   dawn: a solar schedule: pgsched plans no solar events",
        "imported  nightly: cron '30 2 * * 1-5' in Europe/Berlin -> proj.tasks.report",
        "skipped   off: disabled",
        f"imported  once: once at {(now + timedelta(hours=2)).isoformat()} -> proj.tasks.once",
        "imported  poll: every 30s -> proj.tasks.poll",
        "3 imported, 0 updated, 0 unchanged, 3 skipped (job 'celery', scopes periodic_task:<name>)",
    ], done.stdout
    admin = pgsched.Admin(runtime_dsn, schema=schema)
    got = {s.scope.id: s for s in admin.list_schedules(CELERY)}
    assert sorted(got) == ["nightly", "once", "poll"]
    poll = got["poll"]
    assert (poll.every, poll.paused) == (timedelta(seconds=30), False)
    assert poll.payload == {
        "task": "proj.tasks.poll",
        "args": [1, "a"],
        "kwargs": {"full": True},
        "options": {
            "queue": "fast",
            "routing_key": "fast.poll",
            "priority": 4,
            "expires": 20,
            "headers": {"tenant": "7", "periodic_task_name": "poll"},
        },
        "description": "polls the feed",
    }
    nightly = got["nightly"]
    assert (nightly.cron, nightly.timezone) == ("30 2 * * 1-5", "Europe/Berlin")
    assert nightly.starts_at == now + timedelta(1)
    assert nightly.next_plan_time is not None and nightly.next_plan_time >= now + timedelta(1)
    once = got["once"]
    assert once.next_plan_time == now + timedelta(hours=2)
    # The originals are left as they were.
    tasks = beat_models.PeriodicTask.objects
    assert tasks.count() == 6
    assert sorted(tasks.filter(enabled=True).values_list("name", flat=True)) == [
        "both-days",
        "dawn",
        "nightly",
        "once",
        "poll",
    ]


def test_a_re_import_updates_what_changed_keeps_pauses_and_never_duplicates(
    beat_models: ModuleType, registered: str, pg_dsn: str, schema: str, db: Any
) -> None:
    m = beat_models
    _tasks(m, db_now(db))
    # The default source is pgsched's own database, the tables on its search_path.
    dsn = source_dsn(pg_dsn, f"{schema}_dj")
    first = pgsched_cli("celery", "import-django-celery-beat", dsn=dsn, schema=schema)
    assert first.returncode == 0, first.stderr
    admin = pgsched.Admin(pg_dsn, schema=schema)
    admin.pause_schedule(CELERY, pgsched.Scope("periodic_task", "nightly"))
    before = {s.scope.id: s for s in admin.list_schedules(CELERY)}

    again = pgsched_cli("celery", "import-django-celery-beat", "--json", dsn=dsn, schema=schema)
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["summary"] == {"imported": 0, "updated": 0, "unchanged": 3, "skipped": 3}
    after = {s.scope.id: s for s in admin.list_schedules(CELERY)}
    assert {k: v.updated_at for k, v in after.items()} == {
        k: v.updated_at for k, v in before.items()
    }
    assert after["nightly"].paused

    poll = m.PeriodicTask.objects.get(name="poll")
    poll.interval = m.IntervalSchedule.objects.create(every=1, period="minutes")
    poll.save()
    m.PeriodicTask.objects.create(
        name="new", task="proj.tasks.new", interval=poll.interval, queue="slow"
    )
    dry = pgsched_cli("celery", "import-django-celery-beat", "--dry-run", dsn=dsn, schema=schema)
    assert dry.returncode == 0, dry.stderr
    assert "updated   poll: every 1m -> proj.tasks.poll" in dry.stdout.splitlines()
    assert "imported  new: every 1m -> proj.tasks.new" in dry.stdout.splitlines()
    assert dry.stdout.splitlines()[-1].endswith("(dry run: nothing written)")
    assert sorted(s.scope.id for s in admin.list_schedules(CELERY)) == ["nightly", "once", "poll"]
    unchanged = admin.get_schedule(CELERY, pgsched.Scope("periodic_task", "poll"))
    assert unchanged is not None and unchanged.every == timedelta(seconds=30)

    third = pgsched_cli("celery", "import-django-celery-beat", dsn=dsn, schema=schema)
    assert third.returncode == 0, third.stderr
    assert third.stdout.splitlines()[-1].startswith("1 imported, 1 updated, 2 unchanged, 3 skipped")
    final = {s.scope.id: s for s in admin.list_schedules(CELERY)}
    assert sorted(final) == ["new", "nightly", "once", "poll"]
    assert final["poll"].every == timedelta(minutes=1)
    assert final["nightly"].paused


def test_no_tables_or_no_beat_yet_is_one_line_and_nothing_written(
    beat_models: ModuleType, migrated: str, pg_dsn: str, schema: str, db: Any
) -> None:
    _tasks(beat_models, db_now(db))
    no_tables = pgsched_cli("celery", "import-django-celery-beat", dsn=pg_dsn, schema=schema)
    assert no_tables.returncode == 1
    assert no_tables.stderr.startswith("pgsched: error: no django-celery-beat tables on the")
    assert len(no_tables.stderr.splitlines()) == 1, no_tables.stderr
    dsn = source_dsn(pg_dsn, f"{schema}_dj")
    no_beat = pgsched_cli("celery", "import-django-celery-beat", dsn=dsn, schema=schema)
    assert no_beat.returncode == 1
    assert no_beat.stderr.splitlines() == [
        "pgsched: error: unknown job 'celery': no replica has registered it: start a beat with"
        " -S pgsched (it registers the dynamic job 'celery'), then import again"
    ]
    unreachable = "postgresql://someone:s3cret-pw@127.0.0.1:1/nothing"
    down = pgsched_cli(
        "celery", "import-django-celery-beat", "--from-dsn", unreachable, dsn=dsn, schema=schema
    )
    assert down.returncode == 1
    assert down.stderr.startswith("pgsched: error: database error on 127.0.0.1:1: ")
    assert len(down.stderr.splitlines()) == 1 and "s3cret-pw" not in down.stderr, down.stderr
    count = db.execute(f'SELECT count(*) FROM "{schema}".schedules').fetchone()[0]
    assert count == 0


def test_a_bad_celery_payload_is_refused_with_one_line(
    registered: str, runtime_dsn: str, schema: str, db: Any
) -> None:
    put = pgsched_cli(
        "schedules",
        "put",
        CELERY,
        "tenant:7",
        "--every",
        "1m",
        "--payload",
        json.dumps({"task": "proj.tasks.sync", "options": {"queue": "q", "routing": "r"}}),
        dsn=runtime_dsn,
        schema=schema,
    )
    assert put.returncode == 1
    assert put.stderr.splitlines() == [
        "pgsched: error: job 'celery', scope tenant:7: payload['options']['routing']=\"r\" is"
        " not a send_task option pgsched sends (known: compression, countdown, exchange,"
        " expires, headers, ignore_result, priority, queue, routing_key, serializer, shadow,"
        " soft_time_limit, time_limit)"
    ]
    admin = pgsched.Admin(runtime_dsn, schema=schema)
    assert admin.list_schedules(CELERY) == []
    with pytest.raises(pgsched.ConfigError, match=r"payload\['task'\]=null"):
        admin.put_schedule(CELERY, pgsched.Scope("tenant", "7"), every="1m", payload={})
