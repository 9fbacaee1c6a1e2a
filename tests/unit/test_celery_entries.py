"""``beat_schedule`` entries read as pgsched jobs (``pgsched.celery``): crontabs in the app's
zone as cron expressions, intervals as cadences, what cannot be planned refused by name."""

from __future__ import annotations

import tomllib
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from celery import Celery
from celery.beat import ScheduleEntry
from celery.schedules import BaseSchedule, crontab, schedule, solar
from celery.utils.imports import symbol_by_name
from packaging.requirements import Requirement

import pgsched
from pgsched.celery import BeatScheduler, BeatSettings, build_scheduler, cron_expression, read_entry


def _app(**conf: Any) -> Celery:
    app = Celery("t", broker="memory://")
    app.conf.update(**conf)
    return app


def _entries(app: Celery, **given: Any) -> list[ScheduleEntry]:
    return [
        ScheduleEntry(name=name, task="proj.task", app=app, **entry)
        for name, entry in given.items()
    ]


def test_a_crontab_in_berlin_plans_in_berlin_across_spring_forward() -> None:
    app = _app(timezone="Europe/Berlin")
    entries = _entries(app, nightly={"schedule": crontab(hour=2, minute=30)})
    scheduler, (entry,) = build_scheduler(app, entries, None)
    assert entry.job == "celery:nightly"
    assert (entry.job_options["cron"], entry.job_options["timezone"]) == (
        "30 2 * * *",
        "Europe/Berlin",
    )
    # 2026-03-29 02:00 CET jumps to 03:00 CEST: 02:30 does not exist that day, and the plan
    # is the first instant after the gap (03:00 CEST = 01:00 UTC), once.
    plans = scheduler.upcoming("celery:nightly", datetime(2026, 3, 27, 12, tzinfo=UTC), 4)
    assert plans == [
        datetime(2026, 3, 28, 1, 30, tzinfo=UTC),  # 02:30 CET
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),  # 03:00 CEST, the gap's end
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),  # 02:30 CEST
        datetime(2026, 3, 31, 0, 30, tzinfo=UTC),
    ]


def test_the_zone_follows_enable_utc_when_no_timezone_is_set() -> None:
    entries = {"e": {"schedule": crontab(minute=0, hour=9)}}
    utc = _app(enable_utc=True)
    _, (entry,) = build_scheduler(utc, _entries(utc, **entries), None)
    assert entry.job_options["timezone"] in ("UTC", "Etc/UTC")


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (crontab(), "* * * * *"),
        (crontab(minute="*/15"), "0,15,30,45 * * * *"),
        (crontab(minute=0, hour="9-17", day_of_week="mon-fri"), "0 9-17 * * 1-5"),
        (crontab(minute=5, hour=0, day_of_month=1, month_of_year="1,7"), "5 0 1 1,7 *"),
        (crontab(minute=0, hour=0, day_of_week="sun"), "0 0 * * 0"),
    ],
)
def test_crontab_fields_as_cron(given: crontab, expected: str) -> None:
    assert cron_expression("e", given) == expected


def test_intervals_as_cadences() -> None:
    app = _app()
    entries = _entries(
        app,
        td={"schedule": timedelta(minutes=5)},
        number={"schedule": 30},
        sched={"schedule": schedule(timedelta(seconds=2))},
    )
    _, read = build_scheduler(app, entries, None)
    assert [e.job_options["every"] for e in read] == [
        timedelta(minutes=5),
        timedelta(seconds=30),
        timedelta(seconds=2),
    ]


def _solar() -> solar:
    # A solar schedule as Celery builds it, without the ephem library it computes with.
    when = solar.__new__(solar)
    when.event, when.lat, when.lon = "sunrise", 52.5, 13.4
    BaseSchedule.__init__(when)
    return when


class _Custom(schedule):  # type: ignore[misc]
    pass


@pytest.mark.parametrize(
    ("when", "words"),
    [
        (_solar(), "entry 'e': a solar schedule is not supported"),
        (_Custom(timedelta(seconds=5)), "entry 'e': a _Custom schedule is not supported"),
        (crontab(minute=0, day_of_month=1, day_of_week=1), "entry 'e': a crontab restricting"),
    ],
)
def test_what_cron_cannot_express_is_refused_naming_the_entry(when: Any, words: str) -> None:
    app = _app()
    with pytest.raises(pgsched.ConfigError, match=words) as caught:
        build_scheduler(app, _entries(app, e={"schedule": when}), None)
    assert "\n" not in str(caught.value)


def test_pgsched_options_are_taken_out_and_others_pass_through() -> None:
    app = _app()
    options = {
        "queue": "q",
        "routing_key": "rk",
        "priority": 5,
        "expires": 30,
        "headers": {"h": "v"},
        "pgsched": {"catch_up": "every_plan", "jitter": "1s", "scopes": ["tenant:1"]},
    }
    (entry,) = _entries(app, e={"schedule": 10, "options": options, "args": [1]})
    read = read_entry(entry, "UTC")
    assert read.options == {k: v for k, v in options.items() if k != "pgsched"}
    assert read.job_options["catch_up"] == "every_plan"
    assert read.job_options["max_plans_per_tick"] == 10
    assert read.job_options["scopes"] == [pgsched.Scope("tenant", "1")]
    assert read.job_options["overlap"] == "allow"
    assert read.call_args() == ([1], {})


def test_an_entry_on_a_calendar_plans_working_days_only() -> None:
    app = _app(timezone="Europe/Berlin")
    weekdays = pgsched.Calendar("mon-fri")
    entries = _entries(
        app,
        report={
            "schedule": crontab(hour=9, minute=0),
            "options": {"pgsched": {"calendar": weekdays, "on_excluded": "next_working_day"}},
        },
        daily={
            "schedule": crontab(hour=9, minute=0),
            "options": {"pgsched": {"calendar": weekdays}},
        },
    )
    scheduler, _ = build_scheduler(app, entries, None)
    friday = datetime(2026, 12, 4, 12, tzinfo=UTC)
    # Saturday's and Sunday's 09:00 move to Monday's, which is one plan; skipped, they are gone.
    assert scheduler.upcoming("celery:report", friday, 2) == [
        datetime(2026, 12, 7, 8, tzinfo=UTC),
        datetime(2026, 12, 8, 8, tzinfo=UTC),
    ]
    assert scheduler.upcoming("celery:daily", friday, 1) == [datetime(2026, 12, 7, 8, tzinfo=UTC)]


def test_a_bad_calendar_option_is_refused_naming_the_entry_job() -> None:
    app = _app()
    entries = _entries(app, e={"schedule": 10, "options": {"pgsched": {"on_excluded": "later"}}})
    with pytest.raises(pgsched.ConfigError, match=r"celery:e.*on_excluded"):
        build_scheduler(app, entries, None)


def test_an_unknown_pgsched_option_is_refused_naming_the_entry() -> None:
    app = _app()
    (entry,) = _entries(app, e={"schedule": 10, "options": {"pgsched": {"catchup": "x"}}})
    with pytest.raises(pgsched.ConfigError, match="entry 'e': unknown pgsched option 'catchup'"):
        read_entry(entry, "UTC")


def test_the_entry_point_names_the_beat_scheduler() -> None:
    # `celery beat -S pgsched` resolves the alias through this entry point (an installed
    # pgsched's metadata comes from pyproject.toml).
    root = Path(__file__).resolve().parents[2]
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    target = project["entry-points"]["celery.beat_schedulers"]["pgsched"]
    assert symbol_by_name(target) is BeatScheduler
    assert symbol_by_name("pgsched.celery:BeatScheduler") is BeatScheduler
    # The extra admits the versions the suite runs (pinned in the test group).
    for requirement in map(Requirement, project["optional-dependencies"]["celery"]):
        assert requirement.name in {"celery", "kombu"}, requirement
        assert requirement.specifier.contains(metadata.version(requirement.name)), requirement


def test_the_settings_come_from_the_celery_config_else_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PGSCHED_SCHEMA", "from_env")
    settings = BeatSettings.from_app(_app(beat_pgsched_http_port="9464"))
    assert (settings.schema, settings.http_port, settings.migrate) == ("from_env", 9464, False)
    given = _app(beat_pgsched_schema="mine", beat_pgsched_dsn="postgresql://x/y")
    assert (BeatSettings.from_app(given).schema, BeatSettings.from_app(given).dsn) == (
        "mine",
        "postgresql://x/y",
    )
    with pytest.raises(pgsched.ConfigError, match="beat_pgsched_http_port='x' must be an integer"):
        BeatSettings.from_app(_app(beat_pgsched_http_port="x"))


def test_overlap_forbid_needs_tracking_and_waits_up_to_its_run_timeout() -> None:
    forbid = {"schedule": 10, "options": {"pgsched": {"overlap": "forbid"}}}
    app = _app()
    with pytest.raises(pgsched.ConfigError) as refused:
        build_scheduler(app, _entries(app, poll=forbid), None)
    line = str(refused.value)
    assert "entry 'poll'" in line and "beat_pgsched_track = True" in line
    assert "\n" not in line
    tracked = _app(beat_pgsched_track=True)
    given = {"schedule": 10, "options": {"pgsched": {"overlap": "forbid", "run_timeout": "5m"}}}
    _, (waits, bounded, free) = build_scheduler(
        tracked, _entries(tracked, poll=forbid, slow=given, other={"schedule": 10}), None
    )
    assert (waits.waits_for_previous, waits.job_options["run_timeout"]) == (True, "1h")
    assert waits.job_options["stale_timeout"] is None  # pgsched's: run_timeout + 1 minute
    assert (bounded.waits_for_previous, bounded.job_options["run_timeout"]) == (True, "5m")
    assert (free.waits_for_previous, free.job_options["run_timeout"]) == (False, "10s")
    assert BeatSettings.from_app(tracked).track and not BeatSettings.from_app(app).track
