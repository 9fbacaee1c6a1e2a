"""Schedules as data, the pure part (docs/schedules.md): validation, normalisation, plan times."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import pgsched
from pgsched._errors import ConfigError
from pgsched._jobs.spec import build_job
from pgsched._planning.recurrence import CronRecurrence
from pgsched._planning.schedules import (
    MAX_PAYLOAD_BYTES,
    ValidSchedule,
    check_fields,
    check_schedule,
    first_plan_after,
    plans_between,
    recurrence_for,
)
from pgsched._structures import Schedule, ScheduleSpec, Scope

US = timedelta(microseconds=1)
USER = Scope("user", "42")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, sec: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, sec, tzinfo=UTC)


def valid(**kw: Any) -> ValidSchedule:
    return check_schedule("reminder", ScheduleSpec(USER, **kw))


def job_planner(cron: str, zone: str) -> Any:
    """The planner a code-defined job with this cron and zone gets."""
    return build_job(lambda run: None, name="job", cron=cron, timezone=zone).recurrence


def unchecked_scope(kind: str, ident: str) -> Scope:
    """A Scope that skipped its own checks (only way to get one over the limits)."""
    scope = object.__new__(Scope)
    object.__setattr__(scope, "kind", kind)
    object.__setattr__(scope, "id", ident)
    return scope


# --- validation --------------------------------------------------------------------------

T0 = utc(2027, 1, 1)
INVALID: list[tuple[dict[str, Any], str, str]] = [
    # (ScheduleSpec keyword arguments, field named, value as shown)
    ({}, "every", "every=None, cron=None"),
    ({"every": "1h", "cron": "0 9 * * *"}, "cron", "every='1h', cron='0 9 * * *'"),
    ({"cron": "61 * * * *"}, "cron", "'61 * * * *'"),
    ({"cron": "0 9 * *"}, "cron", "'0 9 * *'"),
    ({"cron": "* * * * * *"}, "cron", "'* * * * * *'"),
    ({"cron": "R 9 * * *"}, "cron", "'R 9 * * *'"),
    ({"cron": "H 9 * * *"}, "cron", "'H 9 * * *'"),
    ({"cron": "0 H(0-5) * * *"}, "cron", "'0 H(0-5) * * *'"),
    ({"cron": "0 9 31 2 *"}, "cron", "'0 9 31 2 *'"),
    ({"cron": 5}, "cron", "5"),
    ({"cron": "0 9 * * *", "timezone": "Mars/Olympus"}, "timezone", "'Mars/Olympus'"),
    ({"cron": "0 9 * * *", "timezone": "America"}, "timezone", "'America'"),
    ({"cron": "0 9 * * *", "timezone": "europe/berlin"}, "timezone", "'europe/berlin'"),
    ({"every": "1h", "timezone": None}, "timezone", "None"),
    ({"every": 0}, "every", "0"),
    ({"every": "0s"}, "every", "'0s'"),
    ({"every": -5}, "every", "-5"),
    ({"every": "-5m"}, "every", "'-5m'"),
    ({"every": "soon"}, "every", "'soon'"),
    ({"every": True}, "every", "True"),
    ({"every": float("nan")}, "every", "nan"),
    ({"every": "200y"}, "every", "'200y'"),
    ({"every": "1h", "payload": [1, 2]}, "payload", "[1, 2]"),
    ({"every": "1h", "payload": "text"}, "payload", "'text'"),
    ({"every": "1h", "payload": {"a": {1, 2}}}, "payload", "{'a': {1, 2}}"),
    ({"every": "1h", "payload": {"at": T0}}, "payload", "{'at': datetime.datetime(2027"),
    ({"every": "1h", "payload": {"x": float("nan")}}, "payload", "{'x': nan}"),
    ({"every": "1h", "payload": {1: "a"}}, "payload", "{1: 'a'}"),
    ({"every": "1h", "payload": {"a": {2: "b"}}}, "payload", "{'a': {2: 'b'}}"),
    ({"every": "1h", "payload": {"a": "\x00"}}, "payload", "{'a': '\\x00'}"),
    ({"every": "1h", "payload": {"a": "x" * 20000}}, "payload", "{'a': 'xxxxx"),
    ({"every": "1h", "starts_at": datetime(2027, 1, 1)}, "starts_at", "'2027-01-01T00:00:00'"),
    ({"every": "1h", "ends_at": datetime(2027, 1, 1)}, "ends_at", "'2027-01-01T00:00:00'"),
    ({"every": "1h", "starts_at": "2027-01-01"}, "starts_at", "'2027-01-01'"),
    ({"every": "1h", "ends_at": utc(9500, 1, 1)}, "ends_at", "'9500-01-01T00:00:00+00:00'"),
    ({"every": "1h", "starts_at": T0, "ends_at": T0}, "ends_at", "'2027-01-01T00:00:00+00:00'"),
    (
        {"every": "1h", "starts_at": T0, "ends_at": T0 - timedelta(days=1)},
        "ends_at",
        "'2026-12-31T00:00:00+00:00' must be later than starts_at='2027-01-01T00:00:00+00:00'",
    ),
    ({"every": "1h", "paused": "yes"}, "paused", "'yes'"),
]


@pytest.mark.parametrize(("kwargs", "field", "shown"), INVALID)
def test_invalid_field_names_job_scope_field_and_value(
    kwargs: dict[str, Any], field: str, shown: str
) -> None:
    with pytest.raises(ConfigError) as info:
        check_schedule("reminder", ScheduleSpec(USER, **kwargs))
    message = str(info.value)
    assert message.startswith("job 'reminder', scope user:42: "), message
    assert f"{field}=" in message
    assert shown in message
    assert "\n" not in message
    assert len(message) < 400


def test_message_format_for_a_bad_cron() -> None:
    with pytest.raises(ConfigError) as info:
        valid(cron="61 * * * *")
    assert str(info.value) == (
        "job 'reminder', scope user:42: cron='61 * * * *' is not a valid cron expression "
        "([61 * * * *] is not acceptable, out of range)"
    )


def test_random_and_hashed_fields_are_refused_as_for_jobs() -> None:
    for expr in ("R 9 * * *", "H 9 * * *"):
        with pytest.raises(ConfigError):
            build_job(lambda run: None, name="job", cron=expr)
        with pytest.raises(ConfigError, match="not a valid cron expression"):
            valid(cron=expr)


def test_oversize_scope_id_is_refused_naming_job_scope_field_and_value() -> None:
    scope = unchecked_scope("user", "x" * 1025)
    with pytest.raises(ConfigError) as info:
        check_schedule("reminder", ScheduleSpec(scope, every="1h"))
    message = str(info.value)
    assert message.startswith("job 'reminder', scope user:xxxx")
    assert "(1030 characters)" in message  # the scope is shortened in the message
    assert "id='xxxx" in message
    assert "1025 bytes; the limit is 1024 bytes" in message
    with pytest.raises(ConfigError, match="1025 bytes"):
        Scope("user", "x" * 1025)  # the public constructor refuses it first


def test_oversize_scope_kind_in_multibyte_characters() -> None:
    scope = unchecked_scope("é" * 513, "42")  # 1026 bytes of UTF-8, 513 characters
    with pytest.raises(ConfigError, match=r"kind='éé.*1026 bytes"):
        check_schedule("reminder", ScheduleSpec(scope, every="1h"))
    check_schedule("reminder", ScheduleSpec(Scope("é" * 512, "42"), every="1h"))


def test_scope_shown_as_repr_when_not_printable() -> None:
    # (a right-to-left override: legal in a scope, unlike a control character such as "\n")
    with pytest.raises(ConfigError) as info:
        check_schedule("reminder", ScheduleSpec(Scope("user", "a\u202eb"), cron="bad"))
    assert str(info.value).startswith("job 'reminder', scope 'user:a\\u202eb': cron='bad'")


def test_a_scope_with_a_control_character_is_refused_naming_job_field_and_value() -> None:
    # Scope() refuses it when built; a Scope that skipped those checks is refused here again.
    bypassed = object.__new__(Scope)
    object.__setattr__(bypassed, "kind", "user")
    object.__setattr__(bypassed, "id", "a\tb")
    with pytest.raises(ConfigError) as info:
        check_schedule("reminder", ScheduleSpec(bypassed, every="1h"))
    assert str(info.value) == (
        "job 'reminder', scope 'user:a\\tb': Scope id='a\\tb' contains a control character (tab)"
    )


@pytest.mark.parametrize(
    ("field", "hint"),
    [
        ("tz", " (did you mean 'timezone'?)"),
        ("schedule", " (did you mean 'cron' or 'every'?)"),
        ("data", " (did you mean 'payload'?)"),
        ("ends", " (did you mean 'ends_at'?)"),
        ("zzz", ""),
    ],
)
def test_an_unknown_schedule_field_names_the_field_meant(field: str, hint: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_fields("reminder", Scope("user", "42"), ["every", field])
    assert str(info.value) == f"job 'reminder', scope user:42: unknown field {field!r}{hint}"
    check_fields("reminder", Scope("user", "42"), ["every", "timezone", "paused"])


def test_scope_that_is_not_a_scope() -> None:
    with pytest.raises(ConfigError, match=r"^job 'reminder': scope='user:42' must be a"):
        check_schedule("reminder", ScheduleSpec("user:42", every="1h"))  # type: ignore[arg-type]


def test_job_name_and_spec_type_are_checked() -> None:
    with pytest.raises(ConfigError, match="job name"):
        check_schedule("", ScheduleSpec(USER, every="1h"))
    with pytest.raises(ConfigError, match=r"^job 'reminder': spec=\{'every': '1h'\} must be"):
        check_schedule("reminder", {"every": "1h"})  # type: ignore[arg-type]


def test_payload_limit_is_16_kib_of_canonical_utf8_json() -> None:
    assert MAX_PAYLOAD_BYTES == 16 * 1024
    overhead = len('{"a":""}')
    at_limit = valid(every="1h", payload={"a": "x" * (MAX_PAYLOAD_BYTES - overhead)})
    assert len(at_limit.payload_json.encode()) == MAX_PAYLOAD_BYTES
    with pytest.raises(ConfigError, match="16385 bytes as JSON; the limit is 16384 bytes"):
        valid(every="1h", payload={"a": "x" * (MAX_PAYLOAD_BYTES - overhead + 1)})
    # Counted in UTF-8 bytes, not characters: 'é' is two bytes.
    with pytest.raises(ConfigError, match="bytes as JSON"):
        valid(every="1h", payload={"a": "é" * (MAX_PAYLOAD_BYTES // 2)})


def test_cyclic_and_deep_payloads_are_refused_cleanly() -> None:
    cyclic: dict[str, Any] = {}
    cyclic["self"] = cyclic
    with pytest.raises(ConfigError, match="not JSON-serialisable"):
        valid(every="1h", payload=cyclic)
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(ConfigError, match="payload="):
        valid(every="1h", payload={"deep": deep})


# --- normalisation -----------------------------------------------------------------------


def test_normalised_form() -> None:
    berlin = timezone(timedelta(hours=2))
    v = check_schedule(
        "reminder",
        ScheduleSpec(
            USER,
            cron=" 0  9 * * 1-5 ",
            timezone="Europe/Berlin",
            payload={"b": (1, 2), "a": "é", "n": None},
            starts_at=datetime(2027, 6, 1, 9, tzinfo=berlin),
            ends_at=utc(2028, 1, 1),
            paused=True,
        ),
    )
    assert v.job == "reminder" and v.scope == USER
    assert v.every is None and v.cron == "0 9 * * 1-5" and v.timezone == "Europe/Berlin"
    assert v.payload == {"a": "é", "b": [1, 2], "n": None}
    assert v.payload_json == '{"a":"é","b":[1,2],"n":null}'
    assert json.loads(v.payload_json) == v.payload
    assert v.starts_at == utc(2027, 6, 1, 7) and v.starts_at.tzinfo is UTC
    assert v.ends_at == utc(2028, 1, 1)
    assert v.paused is True


def test_defaults_and_every_forms() -> None:
    v = valid(every="1h30m")
    assert v.every == timedelta(minutes=90) and v.cron is None and v.timezone == "UTC"
    assert v.payload == {} and v.payload_json == "{}"
    assert v.starts_at is None and v.ends_at is None and v.paused is False
    assert valid(every=90).every == timedelta(seconds=90)
    assert valid(every=timedelta(days=1)).every == timedelta(days=1)
    assert valid(every=0.5).every == timedelta(milliseconds=500)


def test_payload_is_a_copy() -> None:
    payload = {"list": [1]}
    v = valid(every="1h", payload=payload)
    payload["list"].append(2)
    assert v.payload == {"list": [1]}


def test_as_schedule() -> None:
    v = valid(cron="0 9 * * *", timezone="Europe/Berlin", payload={"text": "hi"})
    s = v.as_schedule(utc(2027, 1, 2, 8), utc(2027, 1, 1), utc(2027, 1, 1, 1))
    assert isinstance(s, Schedule)
    assert (s.job, s.scope, s.every, s.cron, s.timezone) == (
        "reminder",
        USER,
        None,
        "0 9 * * *",
        "Europe/Berlin",
    )
    assert s.payload == {"text": "hi"} and s.payload is not v.payload
    assert s.next_plan_time == utc(2027, 1, 2, 8)
    assert (s.created_at, s.updated_at) == (utc(2027, 1, 1), utc(2027, 1, 1, 1))


def test_spec_key_ignores_payload_window_and_paused() -> None:
    base = valid(cron="0 9 * * *", timezone="Europe/Berlin")
    same = [
        valid(cron="0 9 * * *", timezone="Europe/Berlin"),
        valid(cron="0 9 * * *", timezone="Europe/Berlin", payload={"text": "new"}),
        valid(cron="0 9 * * *", timezone="Europe/Berlin", paused=True),
        valid(cron="0 9 * * *", timezone="Europe/Berlin", starts_at=T0, ends_at=utc(2028, 1, 1)),
        valid(cron="0  9 * * *", timezone="Europe/Berlin"),  # whitespace only
    ]
    for other in same:
        assert other.spec_key == base.spec_key
    different = [
        valid(cron="0 10 * * *", timezone="Europe/Berlin"),
        valid(cron="0 9 * * *", timezone="America/New_York"),
        valid(cron="0 9 * * *"),
        valid(every="1d", timezone="Europe/Berlin"),
    ]
    keys = {base.spec_key, *(v.spec_key for v in different)}
    assert len(keys) == 1 + len(different)
    assert valid(every="1h").spec_key == valid(every=3600).spec_key
    assert valid(every="1h").spec_key != valid(every="2h").spec_key
    assert valid(every="1h").spec_key != valid(every=3600.000001).spec_key
    assert valid(every="1h").spec_key != valid(every="1h", timezone="Europe/Berlin").spec_key


# --- plan times --------------------------------------------------------------------------


def test_first_plan_is_strictly_after_the_put() -> None:
    hourly = valid(every="1h")
    assert first_plan_after(hourly, utc(2027, 1, 1, 10)) == utc(2027, 1, 1, 11)
    assert first_plan_after(hourly, utc(2027, 1, 1, 10) - US) == utc(2027, 1, 1, 10)
    assert first_plan_after(hourly, utc(2027, 1, 1, 10) + US) == utc(2027, 1, 1, 11)
    daily = valid(cron="0 9 * * *")
    assert first_plan_after(daily, utc(2027, 1, 1, 9)) == utc(2027, 1, 2, 9)
    assert first_plan_after(daily, utc(2027, 1, 1, 8, 59, 59)) == utc(2027, 1, 1, 9)
    berlin = valid(cron="0 9 * * *", timezone="Europe/Berlin")
    assert first_plan_after(berlin, utc(2027, 1, 1, 8)) == utc(2027, 1, 2, 8)
    assert first_plan_after(berlin, utc(2027, 7, 1, 7)) == utc(2027, 7, 2, 7)


def test_plan_times_are_aware_utc_for_any_input_zone() -> None:
    plus2 = timezone(timedelta(hours=2))
    plan = first_plan_after(valid(every="1h"), datetime(2027, 1, 1, 12, 30, tzinfo=plus2))
    assert plan == utc(2027, 1, 1, 11) and plan.tzinfo is UTC
    with pytest.raises(ValueError, match="timezone-aware"):
        first_plan_after(valid(every="1h"), datetime(2027, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        plans_between(valid(every="1h"), T0, datetime(2027, 1, 2), 10)


def test_cadence_is_epoch_aligned_and_ignores_the_zone() -> None:
    v = valid(every="7m", timezone="Asia/Kolkata")
    plan = first_plan_after(v, T0)
    assert plan is not None
    assert (plan - utc(1970, 1, 1)) % timedelta(minutes=7) == timedelta(0)
    assert plan == first_plan_after(valid(every="7m"), T0)


# (zone, expression, a local day, the one plan that day in UTC): the README's fixed-hour DST rule.
DST_CASES = [
    # Europe/Berlin 2027: spring 28 March 02:00 CET -> 03:00 CEST; autumn 31 October
    # 03:00 CEST -> 02:00 CET.
    ("Europe/Berlin", "30 2 * * *", (2027, 3, 28), utc(2027, 3, 28, 1, 0)),  # gap: 03:00 CEST
    ("Europe/Berlin", "30 2 * * *", (2027, 10, 31), utc(2027, 10, 31, 0, 30)),  # first 02:30
    ("Europe/Berlin", "30 1 * * *", (2027, 3, 28), utc(2027, 3, 28, 0, 30)),
    ("Europe/Berlin", "30 1 * * *", (2027, 10, 31), utc(2027, 10, 30, 23, 30)),
    ("Europe/Berlin", "30 2 * * *", (2027, 3, 27), utc(2027, 3, 27, 1, 30)),  # day before
    ("Europe/Berlin", "30 2 * * *", (2027, 3, 29), utc(2027, 3, 29, 0, 30)),  # day after
    # America/New_York 2027: spring 14 March 02:00 EST -> 03:00 EDT; autumn 7 November
    # 02:00 EDT -> 01:00 EST.
    ("America/New_York", "30 2 * * *", (2027, 3, 14), utc(2027, 3, 14, 7, 0)),  # gap: 03:00 EDT
    ("America/New_York", "30 2 * * *", (2027, 11, 7), utc(2027, 11, 7, 7, 30)),  # 02:30 EST
    ("America/New_York", "30 1 * * *", (2027, 3, 14), utc(2027, 3, 14, 6, 30)),  # 01:30 EST
    ("America/New_York", "30 1 * * *", (2027, 11, 7), utc(2027, 11, 7, 5, 30)),  # first: EDT
    ("America/New_York", "30 1 * * *", (2027, 11, 8), utc(2027, 11, 8, 6, 30)),  # day after
]


@pytest.mark.parametrize(("zone", "expr", "day", "expected"), DST_CASES)
def test_cron_across_dst_follows_section_3_like_a_job(
    zone: str, expr: str, day: tuple[int, int, int], expected: datetime
) -> None:
    v = valid(cron=expr, timezone=zone)
    day_start = datetime(*day, tzinfo=ZoneInfo(zone)).astimezone(UTC)
    job = job_planner(expr, zone)
    assert first_plan_after(v, day_start) == expected
    assert first_plan_after(v, day_start) == job.next_after(day_start)
    following = first_plan_after(v, expected)
    assert following == job.next_after(expected)
    assert following is not None and following - expected > timedelta(hours=20)  # once a day


@pytest.mark.parametrize("zone", ["Europe/Berlin", "America/New_York"])
@pytest.mark.parametrize("expr", ["30 2 * * *", "30 1 * * *", "30 * * * *", "*/20 1-3 * * *"])
def test_cron_plans_over_dst_months_equal_the_jobs(zone: str, expr: str) -> None:
    v = valid(cron=expr, timezone=zone)
    job = job_planner(expr, zone)
    for start in (utc(2027, 3, 1), utc(2027, 10, 25)):
        end = start + timedelta(days=20)
        expected = job.plans_between(start, end)
        assert plans_between(v, start, end, 10_000) == expected
        chained, t = [], start
        while (nxt := first_plan_after(v, t)) is not None and nxt <= end:
            chained.append(nxt)
            t = nxt
        assert chained == expected


def test_elapsed_time_hourly_cron_fires_twice_in_the_repeated_hour() -> None:
    v = valid(cron="30 * * * *", timezone="Europe/Berlin")
    plans = plans_between(v, utc(2027, 10, 30, 22), utc(2027, 10, 31, 2), 100)
    assert utc(2027, 10, 31, 0, 30) in plans and utc(2027, 10, 31, 1, 30) in plans
    assert plans == [utc(2027, 10, 30, 22, 30) + timedelta(hours=i) for i in range(4)]


def test_window_bounds_plan_times() -> None:
    v = valid(every="1h", starts_at=utc(2027, 1, 1, 10, 30), ends_at=utc(2027, 1, 1, 13))
    assert first_plan_after(v, utc(2027, 1, 1)) == utc(2027, 1, 1, 11)
    assert first_plan_after(v, utc(2027, 1, 1, 11)) == utc(2027, 1, 1, 12)
    assert first_plan_after(v, utc(2027, 1, 1, 12)) is None  # 13:00 is ends_at, excluded
    assert first_plan_after(v, utc(2027, 1, 1, 13)) is None
    assert first_plan_after(v, utc(2030, 1, 1)) is None
    assert plans_between(v, utc(2027, 1, 1), utc(2027, 1, 2), 100) == [
        utc(2027, 1, 1, 11),
        utc(2027, 1, 1, 12),
    ]
    assert plans_between(v, utc(2027, 1, 1, 13), utc(2027, 1, 2), 100) == []


def test_starts_at_on_a_plan_is_included_and_ends_at_on_a_plan_is_not() -> None:
    v = valid(every="1h", starts_at=utc(2027, 1, 1, 10), ends_at=utc(2027, 1, 1, 12))
    assert first_plan_after(v, utc(2027, 1, 1)) == utc(2027, 1, 1, 10)
    assert plans_between(v, utc(2027, 1, 1), utc(2027, 1, 2), 100) == [
        utc(2027, 1, 1, 10),
        utc(2027, 1, 1, 11),
    ]
    # A put after starts_at still gets only plans strictly after the put.
    assert first_plan_after(v, utc(2027, 1, 1, 10)) == utc(2027, 1, 1, 11)


def test_window_with_cron_in_a_zone() -> None:
    v = valid(
        cron="0 9 * * *",
        timezone="Europe/Berlin",
        starts_at=utc(2027, 3, 27, 8),
        ends_at=utc(2027, 3, 29, 7),
    )
    assert plans_between(v, utc(2027, 1, 1), utc(2028, 1, 1), 100) == [
        utc(2027, 3, 27, 8),
        utc(2027, 3, 28, 7),
    ]
    assert first_plan_after(v, utc(2027, 3, 28, 7)) is None


def test_only_ends_at_or_only_starts_at() -> None:
    v = valid(every="1d", ends_at=utc(2027, 1, 3))
    assert plans_between(v, utc(2026, 12, 30), utc(2028, 1, 1), 100) == [
        utc(2026, 12, 31),
        utc(2027, 1, 1),
        utc(2027, 1, 2),
    ]
    w = valid(every="1d", starts_at=utc(2027, 1, 3))
    assert first_plan_after(w, utc(2000, 1, 1)) == utc(2027, 1, 3)


def test_plans_between_takes_the_oldest_limit_plans() -> None:
    v = valid(every="1s")
    plans = plans_between(v, T0, utc(2028, 1, 1), 5)
    assert plans == [T0 + timedelta(seconds=i) for i in range(1, 6)]
    assert plans_between(v, T0, utc(2028, 1, 1), 0) == []
    assert plans_between(v, T0, T0, 10) == []
    assert plans_between(v, T0, T0 - timedelta(days=1), 10) == []
    minutely = valid(cron="* * * * *")
    plans = plans_between(minutely, T0, utc(2027, 2, 1), 1000)
    assert plans == [T0 + timedelta(minutes=i) for i in range(1, 1001)]
    yearly = valid(cron="0 0 1 1 *")
    assert plans_between(yearly, T0, utc(2037, 1, 1), 3) == [
        utc(2028, 1, 1),
        utc(2029, 1, 1),
        utc(2030, 1, 1),
    ]
    assert len(plans_between(yearly, T0, utc(2037, 1, 1), 100)) == 10


def test_planner_is_the_jobs_planner() -> None:
    cron = recurrence_for(valid(cron="0 9 * * *", timezone="Europe/Berlin").spec_key)
    assert isinstance(cron, CronRecurrence)
    assert (cron.dst_repeated, cron.dst_skipped) == ("first", "shift")
    assert cron.tz.key == "Europe/Berlin"
    assert recurrence_for(valid(cron="0 9 * * *", timezone="Europe/Berlin").spec_key) is cron


# --- properties --------------------------------------------------------------------------

instants = st.datetimes(
    min_value=datetime(1970, 1, 2), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
cadences = st.integers(min_value=1, max_value=86400).map(lambda s: timedelta(seconds=s))
fractions = st.floats(min_value=0, max_value=1, exclude_max=True)


@settings(max_examples=150, deadline=None)
@given(cadences, instants, fractions)
@example(timedelta(hours=1), utc(2027, 1, 1, 10), 0.0)
@example(timedelta(seconds=1), utc(2027, 1, 1) - US, 0.5)
def test_first_plan_after_is_strictly_after_and_constant_until_it(
    every: timedelta, t: datetime, fraction: float
) -> None:
    v = valid(every=every)
    plan = first_plan_after(v, t)
    assert plan is not None and t < plan <= t + every
    assert (plan - utc(1970, 1, 1)) % every == timedelta(0)
    inside = t + US * int(((plan - t) // US) * fraction)
    for s in (t, inside, plan - US):
        assert first_plan_after(v, s) == plan
    assert first_plan_after(v, plan) == plan + every


@settings(max_examples=100, deadline=None)
@given(cadences, instants, st.integers(min_value=1, max_value=20))
def test_next_plan_after_is_increasing_and_consistent(
    every: timedelta, t: datetime, count: int
) -> None:
    v = valid(every=every)
    first = first_plan_after(v, t)
    assert first is not None
    chain = [first]
    for _ in range(count):
        prev = chain[-1]
        nxt = first_plan_after(v, prev)
        assert nxt is not None and nxt > prev
        assert nxt == first_plan_after(v, prev)
        chain.append(nxt)
    assert plans_between(v, t, chain[-1], count + 1) == chain


CRON_VARIANTS = [
    ("30 2 * * *", "Europe/Berlin"),
    ("30 1 * * *", "America/New_York"),
    ("*/15 * * * *", "America/New_York"),
    ("0 9 * * 1-5", "Australia/Lord_Howe"),
]


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(CRON_VARIANTS),
    st.datetimes(
        min_value=datetime(2027, 3, 1), max_value=datetime(2027, 11, 30), timezones=st.just(UTC)
    ),
    st.integers(min_value=1, max_value=8),
)
def test_cron_chain_matches_the_jobs_planner(
    spec: tuple[str, str], t: datetime, count: int
) -> None:
    expr, zone = spec
    v = valid(cron=expr, timezone=zone)
    job = job_planner(expr, zone)
    chain: list[datetime] = []
    prev = t
    for _ in range(count):
        nxt = first_plan_after(v, prev)
        assert nxt is not None and nxt > prev
        assert nxt == job.next_after(prev)
        chain.append(nxt)
        prev = nxt
    assert plans_between(v, t, chain[-1], count) == chain


@settings(max_examples=100, deadline=None)
@given(
    cadences,
    instants,
    st.integers(min_value=0, max_value=10 * 86400),
    st.integers(min_value=1, max_value=10 * 86400),
)
def test_plans_respect_the_window(every: timedelta, t: datetime, start: int, length: int) -> None:
    starts_at = t + timedelta(seconds=start)
    ends_at = starts_at + timedelta(seconds=length)
    v = valid(every=every, starts_at=starts_at, ends_at=ends_at)
    plan = first_plan_after(v, t)
    unbounded = valid(every=every)
    expected = first_plan_after(unbounded, max(t, starts_at - US))
    assert expected is not None
    assert plan == (expected if expected < ends_at else None)
    plans = plans_between(v, t, ends_at + timedelta(days=1), 50)
    assert all(starts_at <= p < ends_at for p in plans)
    assert plans[:1] == ([plan] if plan is not None else [])


def test_a_named_calendar_filters_and_moves_a_stored_schedules_plans() -> None:
    from pgsched import Calendar, ScheduleSpec
    from pgsched._planning.schedules import check_schedule, plans_between

    weekdays = {"weekdays": Calendar()}
    scope = pgsched.Scope("user", "1")
    fri = datetime(2027, 3, 12, 9, 0, tzinfo=UTC)  # a Friday
    day = timedelta(days=1)

    def plans(**given: Any) -> list[datetime]:
        valid = check_schedule("job", ScheduleSpec(scope, cron="0 9 * * *", **given), weekdays)
        return plans_between(valid, fri - day / 2, fri + 3 * day, 10)

    assert plans() == [fri + i * day for i in range(4)]
    assert plans(calendar="weekdays") == [fri, fri + 3 * day]
    assert plans(calendar="weekdays", on_excluded="next_working_day") == [fri, fri + 3 * day]
    assert plans(calendar="weekdays", on_excluded="previous_working_day") == [fri, fri + 3 * day]
    # Saturday's and Sunday's plans moved onto Friday's instant are one plan, and a move
    # changes the spec as the calendar does.
    options: tuple[dict[str, Any], ...] = (
        {},
        {"calendar": "weekdays"},
        {"calendar": "weekdays", "on_excluded": "skip"},
        {"calendar": "weekdays", "on_excluded": "next_working_day"},
    )
    keys = {
        check_schedule("job", ScheduleSpec(scope, cron="0 9 * * *", **g), weekdays).spec_key
        for g in options
    }
    assert len(keys) == 3


@pytest.mark.parametrize(
    ("given", "calendars", "message"),
    [
        ({"calendar": "x"}, {}, "calendar='x' is not a registered calendar (registered: none)"),
        ({"calendar": "x"}, None, "calendar='x' is not known here"),
        ({"calendar": 3}, {}, "calendar=3 must be the name of a calendar"),
        ({"on_excluded": "previous_working_day"}, {}, "on_excluded='previous_working_day' needs"),
        ({"on_excluded": "nope"}, {}, "on_excluded='nope' must be one of 'skip'"),
    ],
)
def test_a_bad_calendar_is_refused_naming_the_job_scope_field_and_value(
    given: dict[str, Any], calendars: Any, message: str
) -> None:
    from pgsched import ScheduleSpec
    from pgsched._planning.schedules import check_schedule

    spec = ScheduleSpec(pgsched.Scope("user", "1"), every="1h", **given)
    with pytest.raises(pgsched.ConfigError) as refused:
        check_schedule("job", spec, calendars)
    assert str(refused.value).startswith(f"job 'job', scope user:1: {message}")
