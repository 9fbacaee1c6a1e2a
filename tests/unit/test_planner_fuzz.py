"""Hypothesis: the cron planner across random expressions and zones, and fuzzing of the
duration parser, the cron parser (through ``build_job``) and the result encoder.

Only ConfigError / InvalidResult / "never fires" (None) may come out of hostile input; any
other exception is a bug. test_properties.py covers next/latest/plans_between on a fixed list
of expressions and zones; here both are random.
"""

from __future__ import annotations

import functools
import json
import math
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

import pytest
from croniter import croniter
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pgsched
from pgsched._engine.outcomes import MAX_RESULT_BYTES, Encoded, InvalidResult, encode_result
from pgsched._jobs.spec import build_job
from pgsched._planning.recurrence import CronRecurrence, DstRepeated, DstSkipped
from pgsched._times import parse_duration

HUNDRED_YEARS = timedelta(days=36500)
US = timedelta(microseconds=1)
ZONE_NAMES = sorted(available_timezones())
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def handler(run: pgsched.Run) -> None:
    return None


# -- random 5-field expressions ---------------------------------------------------------------


def cron_field(lo: int, hi: int, names: list[str] | None = None) -> st.SearchStrategy[str]:
    """One field: ``*``, ``*/n``, ``a``, ``a-b``, ``a-b/n``, ``a/n`` (or a name), or a list."""
    value = st.integers(lo, hi)
    value_text = st.one_of(value.map(str), st.sampled_from(names)) if names else value.map(str)
    span = st.tuples(value, value).map(sorted)
    item = st.one_of(
        st.just("*"),
        st.integers(1, hi - lo + 1).map(lambda n: f"*/{n}"),
        value_text,
        span.map(lambda ab: f"{ab[0]}-{ab[1]}"),
        st.tuples(span, st.integers(1, hi - lo + 1)).map(lambda x: f"{x[0][0]}-{x[0][1]}/{x[1]}"),
        st.tuples(value, st.integers(1, hi - lo + 1)).map(lambda x: f"{x[0]}/{x[1]}"),
    )
    return st.one_of(item, st.lists(item, min_size=2, max_size=4).map(",".join))


MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


def sparse_or_any(lo: int, hi: int, names: list[str] | None = None) -> st.SearchStrategy[str]:
    """Mostly one value or a short list, sometimes any form."""
    value = st.integers(lo, hi).map(str)
    return st.one_of(
        value, st.lists(value, min_size=2, max_size=3).map(",".join), cron_field(lo, hi, names)
    )


# Minutes at most every 5: pgsched lists every matching wall time up to 400 days ahead when
# looking for the next plan, so an every-minute expression in a sparse month takes seconds
# per call (e.g. '* * 6-19 */9 6'), too slow for many examples. Every other form is drawn.
minutes = st.one_of(
    st.integers(0, 59).map(str),
    st.lists(st.integers(0, 59).map(str), min_size=2, max_size=4).map(",".join),
    st.integers(5, 59).map(lambda n: f"*/{n}"),
    st.tuples(st.integers(0, 59), st.integers(5, 59)).map(lambda x: f"{x[0]}/{x[1]}"),
    st.tuples(st.integers(0, 29), st.integers(30, 59), st.integers(5, 30)).map(
        lambda x: f"{x[0]}-{x[1]}/{x[2]}"
    ),
)
expressions = st.tuples(
    minutes,
    sparse_or_any(0, 23),
    cron_field(1, 31),
    cron_field(1, 12, MONTHS),
    cron_field(0, 6, DAYS),
).map(" ".join)
zones = st.sampled_from(ZONE_NAMES)
instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
)


@functools.cache
def offset_changes(zone: str, year: int) -> tuple[datetime, ...]:
    """Instants in ``year`` (to the minute) at which ``zone`` changes its UTC offset."""
    tz = ZoneInfo(zone)
    out = []
    t = datetime(year, 1, 1, tzinfo=UTC)
    offset = t.astimezone(tz).utcoffset()
    while t.year == year:
        nxt = t + timedelta(days=7)
        if nxt.astimezone(tz).utcoffset() != offset:
            lo, hi = t, nxt
            while hi - lo > timedelta(minutes=1):
                mid = lo + (hi - lo) / 2
                if mid.astimezone(tz).utcoffset() == offset:
                    lo = mid
                else:
                    hi = mid
            out.append(hi)
            offset = nxt.astimezone(tz).utcoffset()
        t = nxt
    return tuple(out)


@st.composite
def zone_and_instant(draw: st.DrawFn) -> tuple[str, datetime]:
    """A random zone and a random instant, half the time within a day of an offset change."""
    zone = draw(zones)
    t = draw(instants)
    if draw(st.booleans()):
        changes = offset_changes(zone, t.year)
        if changes:
            near = draw(st.sampled_from(changes))
            t = near + timedelta(seconds=draw(st.integers(-86400, 86400)))
    return zone, t


def _aware_utc(p: datetime) -> bool:
    return p.tzinfo is not None and p.utcoffset() == timedelta(0)


@FAST
@given(
    expressions,
    zone_and_instant(),
    st.sampled_from([None, "first", "last", "both"]),
    st.sampled_from([None, "shift", "skip"]),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=36)),
)
@example("0 0 31 2 *", ("Europe/Berlin", datetime(2027, 1, 1, tzinfo=UTC)), None, None, US)
@example("* * * * *", ("Australia/Lord_Howe", datetime(2026, 4, 4, 15, tzinfo=UTC)), None, None, US)
def test_random_expressions_in_random_zones(
    expr: str,
    zone_t: tuple[str, datetime],
    repeated: DstRepeated | None,
    skipped: DstSkipped | None,
    span: timedelta,
) -> None:
    zone, t = zone_t
    s = CronRecurrence(expr, ZoneInfo(zone), repeated, skipped)  # valid: never raises
    nxt = s.next_after(t)
    latest = s.latest_at_or_before(t)
    plans = s.plans_between(t, t + span)
    # instants are aware UTC, unique, sorted, inside (t, t + span]
    assert plans == sorted(set(plans))
    assert all(_aware_utc(p) and t < p <= t + span for p in plans)
    if nxt is None:
        assert plans == [], "next_after found nothing but plans_between did"
    else:
        assert _aware_utc(nxt) and nxt > t
        assert s.plans_between(t, nxt) == [nxt], "a plan lies between t and next_after(t)"
        if plans:
            assert plans[0] == nxt
    if latest is not None:
        assert _aware_utc(latest) and latest <= t
        assert s.plans_between(latest, t) == [], "a plan lies between latest and t"
        assert s.next_after(latest - US) == latest


@settings(max_examples=25, deadline=None)
@given(expressions, zones)
def test_build_job_accepts_a_random_expression_unless_it_never_fires(expr: str, zone: str) -> None:
    try:
        spec = build_job(handler, name="fuzz", cron=expr, timezone=zone)
    except pgsched.ConfigError as exc:
        assert "'fuzz'" in str(exc) and "never fires" in str(exc), str(exc)
        s = CronRecurrence(expr, ZoneInfo(zone))
        assert s.next_after(datetime.now(UTC)) is None
        return
    assert isinstance(spec.recurrence, CronRecurrence) and spec.recurrence.tz.key == zone


# Elapsed-time expressions and the (minutes, hours) their wall times match.
ELAPSED = {
    "0 * * * *": (frozenset({0}), frozenset(range(24))),
    "*/20 * * * *": (frozenset({0, 20, 40}), frozenset(range(24))),
    "15 */2 * * *": (frozenset({15}), frozenset(range(0, 24, 2))),
}


@FAST
@given(zone_and_instant(), st.sampled_from(sorted(ELAPSED)))
def test_elapsed_time_expressions_match_a_minute_scan_in_random_zones(
    zone_t: tuple[str, datetime], expr: str
) -> None:
    """``*``/step hours follow elapsed time (the README's DST rules): every real instant whose
    local time matches fires (oracle: the wall time of each UTC minute of the range)."""
    zone, t = zone_t
    tz = ZoneInfo(zone)
    minutes, hours = ELAPSED[expr]
    start = t.replace(second=0, microsecond=0)
    end = start + timedelta(hours=6)
    want = []
    u = start + timedelta(minutes=1)
    while u <= end:
        local = u.astimezone(tz)
        if local.second == 0 and local.minute in minutes and local.hour in hours:
            want.append(u)
        u += timedelta(minutes=1)
    assert CronRecurrence(expr, tz).plans_between(start, end) == want


# Offset changes larger than the usual 3-hour scan margin (_planning._DST_MARGIN), going
# backwards: the planner widens its margin to the size of the change.
@pytest.mark.parametrize(
    ("zone", "around"),
    [
        ("Pacific/Kwajalein", datetime(1969, 9, 30, 13, tzinfo=UTC)),
        ("Antarctica/Vostok", datetime(1994, 1, 31, 17, tzinfo=UTC)),
    ],
)
def test_backward_shifts_longer_than_three_hours(zone: str, around: datetime) -> None:
    s = CronRecurrence("0 * * * *", ZoneInfo(zone))
    start, end = around - timedelta(hours=1), around + timedelta(hours=30)
    split = s.plans_between(start, around) + s.plans_between(around, end)
    assert s.plans_between(start, end) == split
    assert split[0] == around  # every real hour fires (elapsed time), the change's too
    assert s.next_after(around - timedelta(seconds=1)) == split[0]
    assert s.next_after(around) == split[1]
    assert s.latest_at_or_before(around + timedelta(minutes=90)) == split[1]


def test_a_three_hour_backward_shift_is_still_planned_correctly() -> None:
    # Antarctica/Casey 2020-03-08: +11 -> +08, exactly the planner's margin.
    s = CronRecurrence("0 * * * *", ZoneInfo("Antarctica/Casey"))
    change = datetime(2020, 3, 7, 16, tzinfo=UTC)
    start, end = change - timedelta(hours=1), change + timedelta(hours=30)
    assert s.plans_between(start, end) == s.plans_between(start, change) + s.plans_between(
        change, end
    )
    assert len(s.plans_between(start, end)) == 31  # every real hour: elapsed time


def test_a_rare_but_valid_expression_is_not_called_never_firing() -> None:
    assert croniter("0 0 * 2 1#5", datetime(2026, 1, 1)).get_next(datetime) == datetime(2044, 2, 29)
    try:
        build_job(handler, name="rare", cron="0 0 * 2 1#5")
    except pgsched.ConfigError as exc:
        assert "never fires" not in str(exc), str(exc)


# -- the cron parser, through build_job -------------------------------------------------------

CRON_ALPHABET = [*"0123456789*/-,?LW#RH @\t", "JAN", "MON", "sun", "\x00", "é", "٣", "99"]
cron_texts = st.one_of(
    st.text(max_size=40),
    st.lists(st.sampled_from(CRON_ALPHABET), max_size=30).map("".join),
    st.lists(
        st.lists(st.sampled_from(CRON_ALPHABET), min_size=1, max_size=5).map("".join),
        min_size=1,
        max_size=8,
    ).map(" ".join),
)


@settings(max_examples=300, deadline=None)
@given(cron_texts, st.sampled_from(["UTC", "Europe/Berlin", "Australia/Lord_Howe"]))
@example("* * * *", "UTC")
@example("60 * * * *", "UTC")
@example("*/0 * * * *", "UTC")
@example("0 0 31 2 *", "UTC")
@example("@reboot", "UTC")
@example("0 0 * * * *", "UTC")
@example("0 0 0 * * * *", "UTC")
@example("H * * * *", "UTC")
@example("0 0 29 2 *", "Europe/Berlin")
def test_arbitrary_cron_text_is_a_job_or_a_config_error(text: str, zone: str) -> None:
    try:
        spec = build_job(handler, name="fuzz_job", cron=text, timezone=zone)
    except pgsched.ConfigError as exc:
        message = str(exc)
        assert "'fuzz_job'" in message and "cron=" in message, message
        assert "\n" not in message.strip() or "\n" in text, message
        return
    assert spec.name == "fuzz_job" and isinstance(spec.recurrence, CronRecurrence)


# -- durations ----------------------------------------------------------------------------------

duration_texts = st.one_of(
    st.text(max_size=30),
    st.lists(
        st.sampled_from([*"0123456789.:-+ eE", "s", "m", "h", "d", "w", "ms", "days", "y"]),
        max_size=20,
    ).map("".join),
    st.builds(
        "{}{}".format,
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.sampled_from(["", "s", "m", "h", "d", "w"]),
    ),
)
# Integers beyond a float's range are the subject of the xfail test below.
duration_values: st.SearchStrategy[Any] = st.one_of(
    duration_texts,
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**1000), max_value=2**1000),
    st.timedeltas(),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=2),
    st.just(b"5m"),
)


@settings(max_examples=400, deadline=None)
@given(duration_values, st.booleans())
@example(0, False)
@example(-1, True)
@example(float("nan"), True)
@example(float("inf"), True)
@example(-float("inf"), True)
@example(1e12, True)
@example(1e-300, False)
@example("1e400s", True)
@example("9" * 400 + "s", True)
@example(timedelta.max, True)
@example(timedelta.min, True)
@example("36500d", True)
@example("36500d 1s", True)
def test_parse_duration_is_a_timedelta_in_range_or_a_config_error(
    value: object, allow_zero: bool
) -> None:
    try:
        result = parse_duration(value, field="fuzz_field", job="fuzz_job", allow_zero=allow_zero)
    except pgsched.ConfigError as exc:
        message = str(exc)
        assert "'fuzz_job'" in message and "fuzz_field=" in message, message
        return
    assert isinstance(result, timedelta)
    assert timedelta(0) <= result <= HUNDRED_YEARS
    assert allow_zero or result > timedelta(0)
    if isinstance(value, float):
        assert math.isfinite(value)


@pytest.mark.parametrize("value", [10**400, -(10**400)])
def test_an_integer_too_large_for_a_float_is_a_config_error(value: int) -> None:
    with pytest.raises(pgsched.ConfigError):
        parse_duration(value, field="every", job="huge")


# -- the result encoder -------------------------------------------------------------------------

# Text with NULs and lone surrogates in it, besides ordinary characters.
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=20)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    any_text,
    st.sampled_from(["\x00", "a\x00b", "\ud800", "\\u0000", "\\\\u0000", "\u202e", "\r\n"]),
)
json_ish = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(st.one_of(any_text, st.integers(), st.floats()), children, max_size=4),
    ),
    max_leaves=30,
)


def deep(depth: int, kind: str) -> Any:
    root: Any = [] if kind == "list" else {}
    node = root
    for _ in range(depth):
        child: Any = [] if kind == "list" else {}
        if kind == "list":
            node.append(child)
        else:
            node["k"] = child
        node = child
    return root


class Built:
    """A value too big or too deep to print, built when the test runs; repr is the recipe."""

    def __init__(self, recipe: str, make: Any) -> None:
        self.recipe, self.make = recipe, make

    def __repr__(self) -> str:
        return self.recipe


deep_results = st.tuples(st.integers(0, 20_000), st.sampled_from(["list", "dict"])).map(
    lambda x: Built(f"Result(data=deep({x[0]}, {x[1]!r}))", lambda: pgsched.Result(data=deep(*x)))
)
long_results = st.integers(0, 40_000).map(
    lambda n: Built(f"Result(data='x' * {n})", lambda: pgsched.Result(data="x" * n))
)
handler_values = st.one_of(
    json_ish,
    st.builds(pgsched.Result, st.integers(), json_ish),
    st.builds(pgsched.Result, st.one_of(st.booleans(), st.floats(), st.text()), json_ish),
    deep_results,
    long_results,
    st.builds(pgsched.Result, st.just(0), st.sampled_from([{1, 2}, b"raw", object()])),
)


def _strings(value: Any) -> list[str]:
    """Every string (keys included) inside a parsed JSON value, without recursion."""
    out, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            out.append(item)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            out.extend(item)
            stack.extend(item.values())
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(handler_values)
@example(pgsched.Result(data={"x": float("nan")}))
@example(pgsched.Result(data={"x": "a\u0000b"}))
@example(pgsched.Result(data={"\u0000": 1}))
@example(Built("deep 10,000 lists", lambda: pgsched.Result(data=deep(10_000, "list"))))
@example(Built("deep 10,000 dicts", lambda: pgsched.Result(data=deep(10_000, "dict"))))
@example(pgsched.Result(data={"s": "\udfff"}))
@example(pgsched.Result(data={"path": "C:\\u0000"}))
@example(pgsched.Result(data={"big": 10**5000}))
def test_encode_result_is_encoded_or_invalid_result(value: Any) -> None:
    if isinstance(value, Built):
        value = value.make()
    try:
        encoded = encode_result(value)
    except InvalidResult as exc:
        assert str(exc), "an InvalidResult without a message"
        return
    assert isinstance(encoded, Encoded)
    if encoded.rows_affected is not None:
        assert -(2**63) <= encoded.rows_affected < 2**63
    if encoded.result_json is not None:
        size = len(encoded.result_json.encode("utf-8"))  # valid UTF-8: no lone surrogate
        assert size <= MAX_RESULT_BYTES
        parsed = json.loads(encoded.result_json)  # strict JSON: no NaN, no Infinity
        assert all("\x00" not in s for s in _strings(parsed)), "a NUL reached jsonb"
        assert "NaN" not in encoded.result_json or any("NaN" in s for s in _strings(parsed))


@pytest.mark.parametrize("rows", [0, 1, -1, 2**63 - 1])
def test_every_int_in_bigint_range_is_accepted(rows: int) -> None:
    assert encode_result(rows) == Encoded(rows, None)
    assert encode_result(pgsched.Result(rows_affected=rows)).rows_affected == rows


def test_upcoming_plans_are_increasing_for_random_style_expressions() -> None:
    # A deterministic smoke test of the strategies above: every field form parses.
    for expr in ("*/7 1-5/2 1,15 JAN-JUN/2 MON-FRI", "5/10 */3 L * *", "0 0 15W * *"):
        s = CronRecurrence(expr, ZoneInfo("Europe/Berlin"))
        got = s.upcoming(datetime(2027, 1, 1, tzinfo=UTC), 20)
        assert len(got) == 20 and all(a < b for a, b in pairwise(got))
