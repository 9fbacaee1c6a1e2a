"""The dynamic job ``celery``: the payload rules of its schedules (checked when put and again
when sent), its registration on every beat, and the mapping of django-celery-beat's periodic
tasks into its schedules (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery

import pgsched
from pgsched._errors import PgschedError
from pgsched._operations.django_beat import Refused, task_spec
from pgsched._operations.schedules import check_payload
from pgsched._planning.payloads import PayloadError, check_celery_payload
from pgsched._planning.schedules import check_schedule, first_plan_after
from pgsched.celery import CELERY_JOB, BeatSettings, build_scheduler
from pgsched.celery.entries import dynamic_task

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({}, "payload['task']=null must be the task's name (a non-empty string)"),
        ({"task": 7}, "payload['task']=7 must be the task's name (a non-empty string)"),
        ({"task": "t", "args": "x"}, "payload['args']=\"x\" must be a list"),
        ({"task": "t", "kwargs": [1]}, "payload['kwargs']=[1] must be an object"),
        ({"task": "t", "options": []}, "payload['options']=[] must be an object"),
        (
            {"task": "t", "options": {"qeue": "a"}},
            "payload['options']['qeue']=\"a\" is not a send_task option pgsched sends",
        ),
        (
            {"task": "t", "options": {"priority": 300}},
            "payload['options']['priority']=300 must be from 0 to 255",
        ),
        (
            {"task": "t", "options": {"priority": True}},
            "payload['options']['priority']=true must be an integer",
        ),
        (
            {"task": "t", "options": {"expires": "tomorrow"}},
            "payload['options']['expires']=\"tomorrow\" must be an ISO 8601 instant",
        ),
        ({"task": "t", "when": 1}, "payload['when']=1 is not a key of it"),
    ],
)
def test_a_bad_payload_is_refused_naming_the_field_and_the_value(
    payload: dict[str, Any], message: str
) -> None:
    with pytest.raises(PayloadError) as err:
        check_celery_payload(payload)
    assert str(err.value).startswith(message), str(err.value)


def test_a_put_of_the_job_celery_names_the_schedule_and_other_jobs_are_free() -> None:
    scope = pgsched.Scope("tenant", "7")
    bad = pgsched.ScheduleSpec(scope, every="1m", payload={"task": "t", "args": 1})
    with pytest.raises(pgsched.ConfigError) as err:
        check_payload(check_schedule(CELERY_JOB, bad))
    assert str(err.value) == "job 'celery', scope tenant:7: payload['args']=1 must be a list"
    assert "\n" not in str(err.value)
    check_payload(check_schedule("reminder", bad))  # another job's payload is its own
    good = pgsched.ScheduleSpec(
        scope,
        every="1m",
        payload={
            "task": "proj.tasks.sync",
            "args": [7],
            "kwargs": {"full": True},
            "options": {"queue": "q", "priority": 5, "expires": 30, "headers": {"h": 1}},
        },
    )
    check_payload(check_schedule(CELERY_JOB, good))


def test_a_payload_written_around_the_check_is_refused_when_sent() -> None:
    with pytest.raises(PgschedError, match=r"job 'celery', scope tenant:7: payload\['task'\]"):
        dynamic_task(pgsched.Scope("tenant", "7"), {"args": []})
    task = dynamic_task(pgsched.Scope("tenant", "7"), {"task": "t", "args": [1]})
    assert (task.task, task.args, task.kwargs, task.options) == ("t", [1], {}, {})


def test_every_beat_registers_the_dynamic_job_unless_turned_off() -> None:
    app = Celery("t", broker="memory://")
    scheduler, _ = build_scheduler(app, [], None)
    assert scheduler.jobs[CELERY_JOB].dynamic
    assert BeatSettings.from_app(app).dynamic is True
    app.conf.beat_pgsched_dynamic = "false"
    settings = BeatSettings.from_app(app)
    assert settings.dynamic is False
    off, _ = build_scheduler(app, [], None, dynamic=settings.dynamic)
    assert CELERY_JOB not in off.jobs
    app.conf.beat_pgsched_dynamic = "maybe"
    with pytest.raises(pgsched.ConfigError, match="beat_pgsched_dynamic='maybe'"):
        BeatSettings.from_app(app)


def _row(**given: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "name": "poll",
        "task": "proj.tasks.poll",
        "args": "[]",
        "kwargs": "{}",
        "queue": None,
        "exchange": None,
        "routing_key": None,
        "headers": "{}",
        "priority": None,
        "expires": None,
        "expire_seconds": None,
        "one_off": False,
        "start_time": None,
        "enabled": True,
        "description": "",
        "solar_id": None,
        "interval_every": None,
        "interval_period": None,
        "cron_minute": None,
        "cron_hour": None,
        "cron_day_of_month": None,
        "cron_month_of_year": None,
        "cron_day_of_week": None,
        "cron_timezone": None,
        "clocked_time": None,
    }
    row.update(given)
    return row


def _cron(
    minute: str = "*", hour: str = "*", dom: str = "*", month: str = "*", dow: str = "*"
) -> dict[str, str]:
    return {
        "cron_minute": minute,
        "cron_hour": hour,
        "cron_day_of_month": dom,
        "cron_month_of_year": month,
        "cron_day_of_week": dow,
    }


def test_an_interval_task_is_a_cadence_with_the_send_options_of_django_celery_beat() -> None:
    start, end = NOW + timedelta(days=1), NOW + timedelta(days=30)
    spec = task_spec(
        _row(
            interval_every=30,
            interval_period="seconds",
            args='[1, "a"]',
            kwargs='{"k": 2}',
            queue="fast",
            exchange="",
            routing_key="fast.poll",
            priority=3,
            headers='{"h": "v"}',
            expire_seconds=20,
            start_time=start,
            expires=end,
            description="polls",
        ),
        NOW,
    )
    assert spec.scope == pgsched.Scope("periodic_task", "poll")
    assert (spec.every, spec.cron, spec.starts_at, spec.ends_at) == (
        timedelta(seconds=30),
        None,
        start,
        end,
    )
    assert spec.payload == {
        "task": "proj.tasks.poll",
        "args": [1, "a"],
        "kwargs": {"k": 2},
        "options": {
            "queue": "fast",
            "routing_key": "fast.poll",
            "priority": 3,
            "expires": end.isoformat(),  # django's expires_: the instant before the seconds
            "headers": {"h": "v", "periodic_task_name": "poll"},
        },
        "description": "polls",
    }
    assert task_spec(_row(interval_every=2, interval_period="days"), NOW).every == timedelta(2)


def test_a_crontab_is_a_cron_expression_in_its_zone() -> None:
    spec = task_spec(
        _row(**_cron("30", "2", dow="mon-fri"), cron_timezone="Europe/Berlin", expire_seconds=9),
        NOW,
    )
    assert (spec.cron, spec.timezone) == ("30 2 * * mon-fri", "Europe/Berlin")
    assert spec.payload is not None and spec.payload["options"]["expires"] == 9
    valid = check_schedule(CELERY_JOB, spec)
    # 02:30 in Berlin (CET, UTC+1) is 01:30 UTC; 2026-12-01 is a Tuesday.
    assert first_plan_after(valid, NOW) == datetime(2026, 12, 2, 1, 30, tzinfo=UTC)


def test_a_clocked_task_runs_once_at_its_instant() -> None:
    at = NOW + timedelta(hours=3, seconds=7, microseconds=5)
    valid = check_schedule(CELERY_JOB, task_spec(_row(clocked_time=at, one_off=True), NOW))
    assert first_plan_after(valid, NOW) == at
    assert first_plan_after(valid, at) is None  # nothing after it: once


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ({"enabled": False, "interval_every": 1, "interval_period": "hours"}, "disabled"),
        ({"solar_id": 4}, "a solar schedule: pgsched plans no solar events"),
        ({}, "no interval, crontab, solar or clocked schedule"),
        (_cron("0", "9", dom="1", dow="1"), "restricts both day_of_month and day_of_week"),
        ({"clocked_time": NOW - timedelta(seconds=1)}, "which has passed"),
        ({"interval_every": 1, "interval_period": "hours", "one_off": True}, "one_off with"),
        ({"interval_every": 1, "interval_period": "hours", "args": "{"}, "args='{' is not a"),
        ({"interval_every": 1, "interval_period": "hours", "kwargs": "[]"}, "kwargs='[]' is not"),
        ({"interval_every": 1, "interval_period": "hours", "expires": NOW}, "expired at"),
    ],
)
def test_what_cannot_be_copied_faithfully_is_refused_with_the_reason(
    given: dict[str, Any], why: str
) -> None:
    with pytest.raises(Refused, match=why.replace("(", r"\(").replace("[", r"\[")):
        task_spec(_row(**given), NOW)
