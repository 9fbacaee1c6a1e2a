"""Hypothesis properties of schedules and of the plan cursor's memo."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from pgsched._planning.recurrence import (
    EPOCH,
    CadenceRecurrence,
    CatchUp,
    CronRecurrence,
    PlanCursor,
    Recurrence,
)

US = timedelta(microseconds=1)

instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2040, 1, 1), timezones=st.just(UTC)
)
# Instants near DST changes, where bugs hide: a transition-heavy month plus a random offset.
dst_instants = st.builds(
    lambda base, secs: base + timedelta(seconds=secs),
    st.sampled_from(
        [
            datetime(2027, 3, 28, tzinfo=UTC),
            datetime(2027, 10, 31, tzinfo=UTC),
            datetime(2027, 3, 14, tzinfo=UTC),
            datetime(2027, 11, 7, tzinfo=UTC),
            datetime(2026, 4, 4, tzinfo=UTC),
            datetime(2026, 10, 3, tzinfo=UTC),
            datetime(2026, 9, 6, tzinfo=UTC),
        ]
    ),
    st.integers(min_value=-86400, max_value=2 * 86400),
)
any_instant = st.one_of(instants, dst_instants)

cadences = st.one_of(
    st.timedeltas(min_value=US, max_value=timedelta(days=3)),
    st.sampled_from([timedelta(seconds=1), timedelta(minutes=5), timedelta(hours=1)]),
)

EXPRS = ["30 2 * * *", "0 * * * *", "*/15 1-3 * * *", "*/7 * * * *", "0 0 * * 1", "0 9 1 * *"]
ZONES = [
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Asia/Kolkata",
]
crons = st.builds(
    CronRecurrence,
    st.sampled_from(EXPRS),
    st.sampled_from(ZONES).map(ZoneInfo),
    st.sampled_from([None, "first", "last", "both"]),
    st.sampled_from([None, "shift", "skip"]),
)
schedules = st.one_of(cadences.map(CadenceRecurrence), crons)
fractions = st.lists(st.floats(min_value=0, max_value=1, exclude_max=True), min_size=1, max_size=4)


def check_next_latest(s: Recurrence, t: datetime, fracs: list[float]) -> None:
    nxt = s.next_after(t)
    latest = s.latest_at_or_before(t)
    assert nxt is not None and latest is not None
    assert nxt > t
    assert latest <= t
    assert nxt.utcoffset() == timedelta(0) and latest.utcoffset() == timedelta(0)
    assert s.latest_at_or_before(nxt) == nxt
    after_latest = s.next_after(latest)
    assert after_latest is not None
    assert after_latest == nxt or after_latest <= t
    # nothing lies strictly between latest and next
    assert s.plans_between(latest, nxt) == [nxt]
    for f in fracs:
        u = t + US * int((nxt - t) // US * f)
        assert t <= u < nxt
        assert s.next_after(u) == nxt
        assert s.latest_at_or_before(u) == s.latest_at_or_before(t)


@settings(max_examples=200, deadline=None)
@given(cadences, instants, fractions)
def test_cadence_next_and_latest(every: timedelta, t: datetime, fracs: list[float]) -> None:
    s = CadenceRecurrence(every)
    check_next_latest(s, t, fracs)
    latest = s.latest_at_or_before(t)
    assert (latest - EPOCH) % every == timedelta(0)
    assert t - latest < every


@settings(max_examples=60, deadline=None)
@given(crons, any_instant, fractions)
def test_cron_next_and_latest(s: CronRecurrence, t: datetime, fracs: list[float]) -> None:
    check_next_latest(s, t, fracs)


@settings(max_examples=60, deadline=None)
@given(
    schedules,
    any_instant,
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=30)),
    st.floats(min_value=0, max_value=1),
    st.floats(min_value=0, max_value=1),
)
def test_plans_between_is_sorted_unique_and_consistent_with_subranges(
    s: Recurrence, t: datetime, span: timedelta, f1: float, f2: float
) -> None:
    if isinstance(s, CadenceRecurrence):
        assume(span / s.every < 5000)
    start, end = t, t + span
    plans = list(s.plans_between(start, end))
    assert plans == sorted(set(plans))
    assert all(start < p <= end for p in plans)
    # splitting the range at any instant splits the plans there
    a, b = sorted((start + span * f1, start + span * f2))
    inner = [p for p in plans if a < p <= b]
    assert list(s.plans_between(a, b)) == inner
    assert list(s.plans_between(start, a)) + list(s.plans_between(a, end)) == plans
    # next_after walks the same plans
    if plans:
        assert s.next_after(start) == plans[0]
        assert s.latest_at_or_before(end) == plans[-1]
        walked = s.upcoming(start, len(plans))
        assert walked == plans
    if isinstance(s, CadenceRecurrence):
        assert s.count_between(start, end) == len(plans)


# -- PlanCursor: a long-lived (memoised) cursor agrees with fresh ones and with an oracle ---


def oracle(
    s: Recurrence,
    now: datetime,
    catch_up: str,
    delay: timedelta,
    window: timedelta,
    max_lateness: timedelta | None,
    limit: int,
) -> tuple[list[datetime], list[datetime]]:
    horizon = now - delay
    if catch_up == "latest_only":
        latest = s.latest_at_or_before(horizon)
        candidates = [] if latest is None else [latest]
    else:
        candidates = [p for p in s.plans_between(horizon - window - US, horizon)][-limit:]
    if max_lateness is None:
        return candidates, []
    late = [p for p in candidates if now - (p + delay) > max_lateness]
    return [p for p in candidates if p not in late], late


cursor_schedules = st.one_of(
    st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(hours=2)).map(
        CadenceRecurrence
    ),
    st.builds(
        CronRecurrence,
        st.sampled_from(["*/15 * * * *", "0 * * * *", "30 2 * * *", "*/10 1-3 * * *"]),
        st.sampled_from(["UTC", "Europe/Berlin", "Australia/Lord_Howe"]).map(ZoneInfo),
    ),
)
steps = st.lists(
    st.one_of(
        st.just(timedelta(0)),
        st.timedeltas(min_value=timedelta(0), max_value=timedelta(minutes=20)),
        st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=8)),
        st.integers(min_value=0, max_value=30).map(lambda m: timedelta(minutes=m)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=80, deadline=None)
@given(
    cursor_schedules,
    st.sampled_from(["latest_only", "every_plan"]),
    st.sampled_from([timedelta(0), timedelta(seconds=30), timedelta(minutes=7)]),
    st.one_of(
        st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(hours=12)),
        st.integers(min_value=1, max_value=600).map(lambda m: timedelta(minutes=m)),
    ),
    st.one_of(
        st.none(),
        st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=3)),
        st.integers(min_value=0, max_value=180).map(lambda m: timedelta(minutes=m)),
    ),
    st.integers(min_value=1, max_value=40),
    st.one_of(dst_instants, instants),
    steps,
)
@example(
    s=CadenceRecurrence(timedelta(minutes=5)),
    catch_up="every_plan",
    delay=timedelta(0),
    window=timedelta(minutes=16),
    max_lateness=timedelta(minutes=7),
    limit=3,
    t0=datetime(2027, 1, 1, 12, 0, 30, tzinfo=UTC),
    deltas=[timedelta(0), timedelta(minutes=4), timedelta(minutes=1), timedelta(hours=3)],
)
def test_long_lived_cursor_matches_fresh_cursors_and_the_spec(
    s: Recurrence,
    catch_up: CatchUp,
    delay: timedelta,
    window: timedelta,
    max_lateness: timedelta | None,
    limit: int,
    t0: datetime,
    deltas: list[timedelta],
) -> None:
    def make() -> PlanCursor:
        return PlanCursor(
            s,
            catch_up=catch_up,
            schedule_delay=delay,
            catch_up_window=window,
            max_lateness=max_lateness,
            limit=limit,
        )

    long_lived = make()
    now = t0
    for step in deltas:
        now = now + step
        got = long_lived.due(now)
        fresh = make().due(now)
        assert got == fresh, now
        plans, late = oracle(s, now, catch_up, delay, window, max_lateness, limit)
        assert got.plans == plans, now
        assert got.late == late, now
        assert got.plans == sorted(got.plans) and got.late == sorted(got.late)
        assert all(p <= now - delay for p in got.plans + got.late)
