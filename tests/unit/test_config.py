"""Eager validation of job options (README, "Job options") and the job's derived settings."""

from __future__ import annotations

import ast
import asyncio
import functools
import inspect
import itertools
import typing
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import pgsched
from pgsched._jobs.spec import build_job, evaluate_scopes
from pgsched._planning.recurrence import CadenceRecurrence, CronRecurrence


def nightly_rollup(run: pgsched.Run) -> None:
    return None


async def async_rollup(run: pgsched.Run) -> None:
    return None


def job(**options: Any) -> pgsched.JobSpec:
    return build_job(nightly_rollup, **options)


# (options, field named in the message, value as shown in the message)
INVALID: list[tuple[dict[str, Any], str, str]] = [
    # durations
    ({"every": "5x"}, "every", "'5x'"),
    ({"every": "0s"}, "every", "'0s'"),
    ({"every": 0}, "every", "0"),
    ({"every": -60}, "every", "-60"),
    ({"every": float("nan")}, "every", "nan"),
    ({"every": float("inf")}, "every", "inf"),
    ({"every": timedelta(seconds=-1)}, "every", "timedelta"),
    ({"every": True}, "every", "True"),
    ({"every": "1m", "run_timeout": "5x"}, "run_timeout", "'5x'"),
    ({"every": "1m", "run_timeout": 0}, "run_timeout", "0"),
    ({"every": "1m", "stale_timeout": "0s"}, "stale_timeout", "'0s'"),
    ({"every": "1m", "heartbeat_interval": 0}, "heartbeat_interval", "0"),
    ({"every": "1m", "catch_up_window": 0}, "catch_up_window", "0"),
    ({"every": "1m", "catch_up_window": "-1d"}, "catch_up_window", "'-1d'"),
    ({"every": "1m", "schedule_delay": -1}, "schedule_delay", "-1"),
    ({"every": "1m", "schedule_delay": float("nan")}, "schedule_delay", "nan"),
    ({"every": "1m", "jitter": "-5s"}, "jitter", "'-5s'"),
    ({"every": "1m", "jitter": float("inf")}, "jitter", "inf"),
    ({"every": "1m", "max_lateness": "soon"}, "max_lateness", "'soon'"),
    ({"every": "1m", "retry_backoff": ["1m", "zz"]}, "retry_backoff[1]", "'zz'"),
    ({"every": "1m", "retry_backoff": ["-1m"]}, "retry_backoff[0]", "'-1m'"),
    ({"every": "1m", "retry_backoff": "1m"}, "retry_backoff", "'1m'"),
    # cron
    ({"cron": "60 * * * *"}, "cron", "'60 * * * *'"),
    ({"cron": "*/0 * * * *"}, "cron", "'*/0 * * * *'"),
    ({"cron": "* * * *"}, "cron", "'* * * *'"),
    ({"cron": "@reboot"}, "cron", "'@reboot'"),
    ({"cron": "0 0 * * * *"}, "cron", "'0 0 * * * *'"),
    ({"cron": "0 0 0 * * * *"}, "cron", "'0 0 0 * * * *'"),
    ({"cron": "0 12 * * 1 2027"}, "cron", "'0 12 * * 1 2027'"),
    ({"cron": "not a cron"}, "cron", "'not a cron'"),
    ({"cron": ""}, "cron", "''"),
    ({"cron": 5}, "cron", "5"),
    ({"cron": "0 0 31 2 *"}, "cron", "'0 0 31 2 *'"),
    ({"cron": "0 0 30 2 *"}, "cron", "'0 0 30 2 *'"),
    ({"cron": "0 * * * *", "timezone": "Mars/Olympus"}, "timezone", "'Mars/Olympus'"),
    ({"cron": "0 * * * *", "timezone": ""}, "timezone", "''"),
    ({"cron": "0 * * * *", "timezone": "../../etc/passwd"}, "timezone", "'../../etc/passwd'"),
    ({"cron": "0 * * * *", "timezone": "America"}, "timezone", "'America'"),
    ({"cron": "0 * * * *", "dst_repeated": "middle"}, "dst_repeated", "'middle'"),
    ({"cron": "0 * * * *", "dst_skipped": "never"}, "dst_skipped", "'never'"),
    # lease timings
    ({"every": "1m", "run_timeout": "5m", "stale_timeout": "5m"}, "stale_timeout", "'5m'"),
    ({"every": "1m", "run_timeout": "5m", "stale_timeout": "4m"}, "stale_timeout", "'4m'"),
    (
        {"every": "1m", "stale_timeout": "11m", "heartbeat_interval": "11m"},
        "heartbeat_interval",
        "'11m'",
    ),
    (
        {"every": "1m", "stale_timeout": "11m", "heartbeat_interval": "1h"},
        "heartbeat_interval",
        "'1h'",
    ),
    (
        {"every": "1m", "run_timeout": "1h", "heartbeat_interval": "2h"},
        "heartbeat_interval",
        "'2h'",
    ),
    # integers
    ({"every": "1m", "max_attempts": 0}, "max_attempts", "0"),
    ({"every": "1m", "max_attempts": -3}, "max_attempts", "-3"),
    ({"every": "1m", "max_attempts": 1.5}, "max_attempts", "1.5"),
    ({"every": "1m", "max_attempts": True}, "max_attempts", "True"),
    ({"every": "1m", "max_attempts": "3"}, "max_attempts", "'3'"),
    ({"every": "1m", "max_running": 0}, "max_running", "0"),
    ({"every": "1m", "priority": "high"}, "priority", "'high'"),
    ({"every": "1m", "priority": True}, "priority", "True"),
    ({"every": "1m", "max_plans_per_tick": 0}, "max_plans_per_tick", "0"),
    # choices
    ({"every": "1m", "catch_up": "every_plan"}, "max_plans_per_tick", "None"),
    ({"every": "1m", "catch_up": "every_plan", "max_plans_per_tick": 0}, "max_plans_per_tick", "0"),
    ({"every": "1m", "catch_up": "all"}, "catch_up", "'all'"),
    ({"every": "1m", "overlap": "maybe"}, "overlap", "'maybe'"),
    ({"every": "1m", "allow_stale_reentry": "yes"}, "allow_stale_reentry", "'yes'"),
    # scopes
    ({"every": "1m", "scopes": ["tenant:1"]}, "scopes", "'tenant:1'"),
    ({"every": "1m", "scopes": 5}, "scopes", "5"),
]


@pytest.mark.parametrize(
    ("options", "field", "shown"), INVALID, ids=[f"{f}={v}" for _, f, v in INVALID]
)
def test_invalid_option_raises_config_error_naming_job_field_and_value(
    options: dict[str, Any], field: str, shown: str
) -> None:
    with pytest.raises(pgsched.ConfigError) as info:
        job(**options)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    assert "'nightly_rollup'" in message
    assert f"{field}=" in message
    assert shown in message


@pytest.mark.parametrize(
    "options",
    [{}, {"every": "1m", "cron": "0 * * * *"}],
    ids=["neither", "both"],
)
def test_exactly_one_of_every_or_cron(options: dict[str, Any]) -> None:
    with pytest.raises(pgsched.ConfigError, match=r"'nightly_rollup'.*every.*cron"):
        job(**options)


def test_every_and_planner_together_are_refused() -> None:
    class Planner:
        def plans_between(self, start: datetime, end: datetime) -> list[datetime]:
            return []

    with pytest.raises(pgsched.ConfigError, match="nightly_rollup"):
        job(every="1m", planner=Planner())


@pytest.mark.parametrize("name", ["", "x" * 201, "a\x00b", 42])
def test_bad_job_names(name: object) -> None:
    with pytest.raises(pgsched.ConfigError, match="name"):
        job(every="1m", name=name)


def test_handler_must_be_callable() -> None:
    with pytest.raises(pgsched.ConfigError):
        build_job("not callable", every="1m")  # type: ignore[arg-type]


def test_bad_dst_value_does_not_blame_the_cron_expression() -> None:
    with pytest.raises(pgsched.ConfigError) as info:
        job(cron="0 * * * *", dst_repeated="middle")
    assert "not a valid cron expression" not in str(info.value)


@pytest.mark.parametrize(
    "options",
    [
        {"timezone": "Mars/Olympus"},
        {"dst_repeated": "middle"},
        {"dst_skipped": "never"},
    ],
)
def test_schedule_options_are_validated_with_every_too(options: dict[str, Any]) -> None:
    with pytest.raises(pgsched.ConfigError):
        job(every="1m", **options)


@pytest.mark.parametrize("expr", ["R * * * *", "0 R * * *"])
def test_random_cron_fields_are_refused(expr: str) -> None:
    with pytest.raises(pgsched.ConfigError):
        job(cron=expr)


# -- valid jobs and defaults ---------------------------------------------------------------


def test_defaults() -> None:
    spec = job(every="5m")
    assert spec.name == "nightly_rollup"
    assert spec.is_async is False
    assert isinstance(spec.recurrence, CadenceRecurrence)
    assert spec.recurrence.every == timedelta(minutes=5)
    assert spec.static_scopes == (pgsched.GLOBAL,)
    assert spec.scopes_fn is None
    assert spec.catch_up == "latest_only"
    assert spec.max_plans_per_tick == 1
    assert spec.catch_up_window == timedelta(days=1)
    assert spec.max_lateness is None
    assert spec.schedule_delay == timedelta(0)
    assert spec.overlap == "forbid"
    assert spec.jitter == timedelta(0)
    assert spec.run_timeout == timedelta(minutes=10)
    assert spec.stale_timeout == timedelta(minutes=11)
    assert spec.heartbeat_interval == timedelta(seconds=30)
    assert spec.allow_stale_reentry is False
    assert spec.max_attempts == 1
    assert spec.retry_backoff == (timedelta(minutes=1),)
    assert spec.max_running is None
    assert spec.priority == 0


@pytest.mark.parametrize(
    ("run_timeout", "stale", "beat"),
    [
        ("10m", timedelta(minutes=11), timedelta(seconds=30)),
        ("2m", timedelta(minutes=3), timedelta(seconds=30)),
        ("15s", timedelta(seconds=75), timedelta(seconds=25)),
        (1, timedelta(seconds=61), timedelta(seconds=61) / 3),
    ],
)
def test_stale_timeout_and_heartbeat_defaults(
    run_timeout: str | int, stale: timedelta, beat: timedelta
) -> None:
    spec = job(every="1m", run_timeout=run_timeout)
    assert spec.stale_timeout == stale
    assert spec.heartbeat_interval == beat
    assert spec.run_timeout < spec.stale_timeout
    assert spec.heartbeat_interval < spec.stale_timeout


def test_heartbeat_default_follows_an_explicit_stale_timeout() -> None:
    spec = job(every="1m", run_timeout="1s", stale_timeout="3s")
    assert spec.stale_timeout == timedelta(seconds=3)
    assert spec.heartbeat_interval == timedelta(seconds=1)


def test_spec_example_job_is_accepted() -> None:
    spec = build_job(
        async_rollup,
        name="tenant_report",
        cron="0 9 * * 1-5",
        timezone="Europe/Berlin",
        # int ids are accepted (stored as text), though Scope.id is typed str
        scopes=lambda now: [pgsched.Scope("tenant", t) for t in (1, 2)],  # type: ignore[arg-type]
        catch_up="every_plan",
        catch_up_window="1d",
        max_plans_per_tick=10,
        max_lateness=None,
        schedule_delay="0s",
        overlap="forbid",
        jitter="0s",
        dst_repeated="first",
        dst_skipped="shift",
        run_timeout="2m",
        stale_timeout="5m",
        heartbeat_interval="30s",
        allow_stale_reentry=True,
        max_attempts=3,
        retry_backoff=["1m", "5m"],
        max_running=None,
        priority=0,
    )
    assert spec.name == "tenant_report"
    assert spec.is_async is True
    assert isinstance(spec.recurrence, CronRecurrence)
    assert spec.recurrence.tz.key == "Europe/Berlin"
    assert spec.max_plans_per_tick == 10
    assert spec.retry_backoff == (timedelta(minutes=1), timedelta(minutes=5))
    assert spec.stale_timeout == timedelta(minutes=5)
    assert spec.scopes_fn is not None and spec.static_scopes is None
    # Monday 2027-01-04 09:00 Berlin = 08:00Z
    assert spec.recurrence.next_after(datetime(2027, 1, 2, tzinfo=UTC)) == datetime(
        2027, 1, 4, 8, tzinfo=UTC
    )


def test_static_scopes_are_deduplicated_in_order() -> None:
    a, b = pgsched.Scope("tenant", "a"), pgsched.Scope("tenant", "b")
    spec = job(every="1m", scopes=[b, a, b, pgsched.Scope("tenant", "a")])
    assert spec.static_scopes == (b, a)
    assert asyncio.run(evaluate_scopes(spec, datetime(2027, 1, 1, tzinfo=UTC))) == (b, a)


def test_scope_callables_sync_and_async() -> None:
    now = datetime(2027, 1, 1, tzinfo=UTC)
    seen = []

    def sync_scopes(t: datetime) -> list[pgsched.Scope]:
        seen.append(t)
        # int ids are accepted (stored as text), though Scope.id is typed str
        return [pgsched.Scope("tenant", 1), pgsched.Scope("tenant", 1), pgsched.Scope("x", 2)]  # type: ignore[arg-type]

    async def async_scopes(t: datetime) -> list[pgsched.Scope]:
        return [pgsched.Scope("tenant", 3)]  # type: ignore[arg-type]

    got = asyncio.run(evaluate_scopes(job(every="1m", scopes=sync_scopes), now))
    assert list(got) == [pgsched.Scope("tenant", "1"), pgsched.Scope("x", "2")]
    assert seen == [now]
    got = asyncio.run(evaluate_scopes(job(every="1m", scopes=async_scopes), now))
    assert list(got) == [pgsched.Scope("tenant", "3")]

    def bad_scopes(t: datetime) -> list[str]:
        return ["tenant:1"]

    with pytest.raises(pgsched.ConfigError, match="nightly_rollup"):
        asyncio.run(evaluate_scopes(job(every="1m", scopes=bad_scopes), now))


class _AsyncCallable:
    __name__ = "async_callable"

    async def __call__(self, run: pgsched.Run) -> None:
        return None


class _SyncCallable:
    __name__ = "sync_callable"

    def __call__(self, run: pgsched.Run) -> None:
        return None


@pytest.mark.parametrize(
    ("handler", "name", "expected"),
    [
        (nightly_rollup, None, False),
        (async_rollup, None, True),
        (_AsyncCallable(), None, True),
        (_SyncCallable(), None, False),
        (functools.partial(async_rollup), "partial_async", True),
        (functools.partial(nightly_rollup), "partial_sync", False),
        (lambda run: None, "lam", False),
    ],
)
def test_async_handlers_are_detected(
    handler: Callable[[pgsched.Run], object], name: str | None, expected: bool
) -> None:
    spec = build_job(handler, every="1m", name=name)
    assert spec.is_async is expected


def test_name_defaults_to_the_function_name_and_can_be_overridden() -> None:
    assert job(every="1m").name == "nightly_rollup"
    assert job(every="1m", name="other").name == "other"
    with pytest.raises(pgsched.ConfigError, match="name"):
        build_job(functools.partial(nightly_rollup), every="1m")


# -- retry delays ----------------------------------------------------------------------------


def test_retry_delay_follows_the_backoff_list_then_repeats_its_last_entry() -> None:
    spec = job(every="1m", max_attempts=5, retry_backoff=["1m", "5m"])
    assert spec.retry_delay(1, 5) == timedelta(minutes=1)  # before attempt 2: backoff[0]
    assert spec.retry_delay(2, 5) == timedelta(minutes=5)  # before attempt 3: backoff[1]
    assert spec.retry_delay(3, 5) == timedelta(minutes=5)  # past the end: last repeats
    assert spec.retry_delay(4, 5) == timedelta(minutes=5)
    assert spec.retry_delay(5, 5) is None  # no attempt left
    assert spec.retry_delay(6, 5) is None


def test_retry_delay_with_an_empty_backoff_retries_at_once() -> None:
    spec = job(every="1m", max_attempts=3, retry_backoff=[])
    assert spec.retry_backoff == ()
    assert spec.retry_delay(1, 3) == timedelta(0)
    assert spec.retry_delay(2, 3) == timedelta(0)
    assert spec.retry_delay(3, 3) is None


def test_retry_delay_default_and_single_attempt() -> None:
    spec = job(every="1m", max_attempts=3)
    assert spec.retry_delay(1, 3) == timedelta(minutes=1)
    assert spec.retry_delay(2, 3) == timedelta(minutes=1)
    assert job(every="1m").retry_delay(1, 1) is None


def test_retry_delay_uses_the_rows_max_attempts() -> None:
    # a row written under an older max_attempts keeps its own limit
    spec = job(every="1m", max_attempts=1, retry_backoff=["2m"])
    assert spec.retry_delay(1, 3) == timedelta(minutes=2)


# -- cursor wiring and the Scheduler ---------------------------------------------------------


def test_new_cursor_carries_the_job_settings() -> None:
    spec = job(
        every="5m",
        catch_up="every_plan",
        max_plans_per_tick=3,
        catch_up_window="16m",
        schedule_delay="1m",
        max_lateness="8m",
    )
    due = spec.new_cursor().due(datetime(2027, 1, 1, 12, 6, tzinfo=UTC))
    # horizon 12:05, oldest 11:49; late when now - (plan + 1m) > 8m, i.e. plan < 11:57
    assert due.late == [
        datetime(2027, 1, 1, 11, 50, tzinfo=UTC),
        datetime(2027, 1, 1, 11, 55, tzinfo=UTC),
    ]
    assert due.plans == [
        datetime(2027, 1, 1, 12, 0, tzinfo=UTC),
        datetime(2027, 1, 1, 12, 5, tzinfo=UTC),
    ]


def test_scheduler_refuses_duplicate_job_names_without_connecting() -> None:
    scheduler = pgsched.Scheduler(dsn="postgresql://x@localhost/x")
    scheduler.register(nightly_rollup, every="1m")
    with pytest.raises(pgsched.ConfigError, match="'nightly_rollup'") as info:
        scheduler.register(nightly_rollup, every="1m")
    assert isinstance(info.value, ValueError)
    with pytest.raises(pgsched.ConfigError, match="'nightly_rollup'"):
        scheduler.register(async_rollup, name="nightly_rollup", cron="0 * * * *")
    assert list(scheduler.jobs) == ["nightly_rollup"]
    schedule = scheduler.jobs["nightly_rollup"].recurrence
    assert isinstance(schedule, CadenceRecurrence) and schedule.every == timedelta(minutes=1)


def test_scheduler_decorator_registers_and_upcoming_lists_plans() -> None:
    scheduler = pgsched.Scheduler(dsn="postgresql://x@localhost/x")

    @scheduler.job(every="15m")
    def quarter(run: pgsched.Run) -> None:
        return None

    assert callable(quarter)
    assert "quarter" in scheduler.jobs
    got = scheduler.upcoming("quarter", datetime(2027, 1, 1, tzinfo=UTC), 2)
    assert got == [datetime(2027, 1, 1, 0, 15, tzinfo=UTC), datetime(2027, 1, 1, 0, 30, tzinfo=UTC)]
    scheduler.unregister("quarter")
    assert scheduler.jobs == {}
    with pytest.raises(pgsched.NotFoundError):
        scheduler.unregister("quarter")


def test_invalid_registration_leaves_no_job_behind() -> None:
    scheduler = pgsched.Scheduler(dsn="postgresql://x@localhost/x")
    with pytest.raises(pgsched.ConfigError):
        scheduler.register(nightly_rollup, every="1m", max_attempts=0)
    assert scheduler.jobs == {}
    scheduler.register(nightly_rollup, every="1m")
    assert list(scheduler.jobs) == ["nightly_rollup"]


# -- the options are visible: help(), editors, mypy --------------------------------------------


def test_every_option_is_typed_and_described_once_in_job_options() -> None:
    """``pgsched.JobOptions`` is the options' one description: its keys are exactly the
    options ``register`` validates (``JOB_DEFAULTS``), each typed and with a docstring of its
    own (what the API reference renders), and ``Scheduler.job`` and ``register`` take them
    as typed keywords."""
    from pgsched._jobs import spec as _config
    from pgsched._jobs.spec import JOB_DEFAULTS

    assert set(pgsched.JobOptions.__optional_keys__) == set(JOB_DEFAULTS)
    tree = ast.parse(inspect.getsource(_config))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "JobOptions")
    described = {
        field.target.id
        for field, doc in itertools.pairwise(cls.body)
        if isinstance(field, ast.AnnAssign)
        and isinstance(field.target, ast.Name)
        and isinstance(doc, ast.Expr)
        and isinstance(doc.value, ast.Constant)
        and isinstance(doc.value.value, str)
    }
    assert described == set(JOB_DEFAULTS)
    hints = typing.get_type_hints(pgsched.JobOptions)
    assert hints["catch_up"] == typing.Literal["latest_only", "every_plan"]
    for method in (pgsched.Scheduler.job, pgsched.Scheduler.register):
        options = inspect.signature(method).parameters["options"]
        assert options.kind is inspect.Parameter.VAR_KEYWORD
        assert typing.get_type_hints(method)["options"] == typing.Unpack[pgsched.JobOptions]


def test_an_unknown_option_is_a_config_error_naming_job_and_option() -> None:
    s = pgsched.Scheduler(dsn="postgresql://localhost/x")
    with pytest.raises(pgsched.ConfigError) as err:
        s.register(lambda run: None, name="nightly", every="1h", max_attemps=3)  # type: ignore[call-arg]
    assert (
        str(err.value)
        == "job 'nightly': unknown option 'max_attemps' (did you mean 'max_attempts'?)"
    )
    assert "nightly" not in s.jobs


def test_an_unknown_option_of_an_unnamed_handler_names_the_function() -> None:
    def rollup(run: pgsched.Run) -> None: ...

    with pytest.raises(pgsched.ConfigError, match=r"job 'rollup': unknown option 'evry'"):
        pgsched.Scheduler(dsn="postgresql://localhost/x").register(rollup, evry="1h")  # type: ignore[call-arg]


# -- after a crash: allow_stale_reentry's default ---------------------------------------------


@pytest.mark.parametrize(
    ("options", "reentry"),
    [
        ({}, False),  # a handler may have done its work before its replica died
        ({"transactional": True}, True),  # a dead run committed nothing
        ({"transactional": True, "allow_stale_reentry": False}, False),
        ({"allow_stale_reentry": True}, True),
        ({"transactional": False, "allow_stale_reentry": None}, False),
    ],
)
def test_stale_reentry_defaults_to_transactional_and_an_explicit_value_wins(
    options: dict[str, Any], reentry: bool
) -> None:
    assert job(every="5m", **options).allow_stale_reentry is reentry
    s = pgsched.Scheduler(dsn="postgresql://localhost/x")
    s.job(every="5m", **options)(nightly_rollup)
    assert s.jobs["nightly_rollup"].allow_stale_reentry is reentry


def test_a_dynamic_transactional_job_is_stolen_by_default() -> None:
    assert job(dynamic=True, transactional=True).allow_stale_reentry is True
    assert job(dynamic=True).allow_stale_reentry is False


# -- an option of another scheduler ------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "hint"),
    [
        ("retries", "(did you mean 'max_attempts'? max_attempts counts the first attempt too:"),
        ("max_retries", "(did you mean 'max_attempts'?"),
        ("timeout", "(did you mean 'run_timeout'?)"),
        ("schedule", "(did you mean 'cron' or 'every'?)"),
        ("tz", "(did you mean 'timezone'?)"),
        ("TZ", "(did you mean 'timezone'?)"),
        ("scope", "(did you mean 'scopes'?)"),
        ("max_attemps", "(did you mean 'max_attempts'?)"),  # no alias: the nearest option
    ],
)
def test_the_decorator_refuses_an_unknown_option_with_a_config_error_and_a_hint(
    option: str, hint: str
) -> None:
    s = pgsched.Scheduler(dsn="postgresql://localhost/x")
    unknown: dict[str, Any] = {option: 3}
    decorate = s.job(every="5m", **unknown)
    with pytest.raises(pgsched.ConfigError) as err:

        @decorate
        def rollup(run: pgsched.Run) -> None: ...

    assert str(err.value).startswith(f"job 'rollup': unknown option {option!r} {hint}"), err.value
    assert s.jobs == {}
    with pytest.raises(pgsched.ConfigError, match=f"job 'named': unknown option {option!r}"):
        s.register(nightly_rollup, name="named", every="5m", **unknown)


# -- control characters in names ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("a\nb", "'a\\nb' contains a control character (newline)"),
        ("a\tb", "'a\\tb' contains a control character (tab)"),
        ("a\x00b", "'a\\x00b' contains a control character (NUL)"),
        ("a\x1bb", "'a\\x1bb' contains a control character (U+001B)"),
        ("a\x85b", "'a\\x85b' contains a control character (U+0085)"),
        ("a\x7fb", "'a\\x7fb' contains a control character (U+007F)"),
    ],
)
def test_a_job_name_with_a_control_character_is_refused(name: str, shown: str) -> None:
    with pytest.raises(pgsched.ConfigError) as err:
        job(name=name, every="5m")
    assert str(err.value) == f"job name={shown}"
    # category Cf (a right-to-left override, a zero-width joiner) is not a control character
    assert job(name="report\u202e\u200d", every="5m").name == "report\u202e\u200d"


@pytest.mark.parametrize(
    ("size", "why"), [(0, ">= 1"), (2_001, "at most 2,000"), ("10", "integer"), (True, "integer")]
)
def test_batch_size_is_a_whole_number_of_runs_up_to_two_thousand(size: Any, why: str) -> None:
    s = pgsched.Scheduler(dsn="postgresql://localhost/x")
    with pytest.raises(pgsched.ConfigError, match=rf"job 'fan': batch_size=.*{why}"):
        s.register(lambda batch: None, name="fan", every="1h", batch_size=size)
