"""Dynamic jobs without a database: the ``dynamic=True`` option and the claim decision for a
due stored schedule (``_dynamic.decide``) under each catch-up rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pgsched
from pgsched._jobs.spec import build_job
from pgsched._planning.dynamic import decide, decide_schedules
from pgsched._planning.schedules import read_schedule
from pgsched._planning.skips import plans_skipped
from pgsched._records import DueSchedule
from tests.support.plans import catch_up_options

T0 = datetime(2027, 3, 10, 12, 0, tzinfo=UTC)  # a Wednesday, no DST change near


def job(**options: Any) -> Any:
    return build_job(lambda run: None, name="reminder", dynamic=True, **options)


def row(next_plan: datetime | None, **cols: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "scope_kind": "user",
        "scope_id": "1",
        "every_us": None,
        "cron": None,
        "timezone": "UTC",
        "starts_at": None,
        "ends_at": None,
        "next_plan_time": next_plan,
        "payload": {},
        "paused": False,
        "created_at": T0,
        "updated_at": T0,
    }
    base.update(cols)
    if base["every_us"] is None and base["cron"] is None:
        base["every_us"] = 60_000_000  # every minute
    return base


def due(next_plan: datetime, **cols: Any) -> DueSchedule:
    """The due schedule a claim reads: ``row``'s spec, window and next plan."""
    full = row(next_plan, **cols)
    fields: dict[str, Any] = {
        f: full.get(f) for f in DueSchedule._fields if f not in ("now", "tid")
    }
    return DueSchedule(**fields, now=T0)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("every", "1h"),
        ("cron", "* * * * *"),
        ("scopes", [pgsched.Scope("user", "1")]),
        ("timezone", "Europe/Berlin"),
        ("dst_skipped", "skip"),
    ],
)
def test_dynamic_refuses_a_schedule_in_code(option: str, value: Any) -> None:
    with pytest.raises(pgsched.ConfigError) as err:
        job(**{option: value})
    assert str(err.value).startswith(f"job 'reminder': {option}=")
    assert "cannot be given with dynamic=True" in str(err.value)


def test_dynamic_must_be_a_bool() -> None:
    with pytest.raises(pgsched.ConfigError, match="dynamic='yes' must be True or False"):
        build_job(lambda run: None, name="x", every="1h", dynamic="yes")


def test_a_dynamic_job_has_no_plans_of_its_own() -> None:
    spec = job(catch_up="every_plan", max_plans_per_tick=3, max_attempts=2)
    assert spec.dynamic and spec.max_attempts == 2
    assert spec.recurrence.describe() == "dynamic"
    assert spec.recurrence.upcoming(T0, 3) == []


def test_a_due_plan_is_claimed_and_the_next_one_follows() -> None:
    d = decide(job(), due(T0), T0 + timedelta(seconds=5))
    assert d.move is not None
    assert (d.move.plan, d.move.next_plan) == (T0, T0 + timedelta(minutes=1))
    assert plans_skipped(d.skips, "superseded") == 0 and plans_skipped(d.skips, "max_lateness") == 0


def test_latest_only_claims_the_newest_and_counts_the_superseded() -> None:
    d = decide(job(), due(T0), T0 + timedelta(minutes=10, seconds=5))
    assert d.move is not None
    assert d.move.plan == T0 + timedelta(minutes=10)
    assert d.move.next_plan == T0 + timedelta(minutes=11)
    assert plans_skipped(d.skips, "superseded") == 10


def test_every_plan_claims_the_oldest_within_the_window() -> None:
    spec = job(catch_up="every_plan", max_plans_per_tick=1, catch_up_window="5m")
    d = decide(spec, due(T0), T0 + timedelta(minutes=10, seconds=5))
    assert d.move is not None
    # The window reaches back 5 minutes from now: 12:05:05, so 12:06 is the oldest plan.
    assert d.move.plan == T0 + timedelta(minutes=6)
    assert d.move.next_plan == T0 + timedelta(minutes=7)
    inside = decide(spec, due(T0), T0 + timedelta(minutes=2))
    assert inside.move is not None and inside.move.plan == T0


def test_max_lateness_skips_late_plans() -> None:
    spec = job(max_lateness="30s")
    d = decide(spec, due(T0), T0 + timedelta(minutes=3, seconds=40))
    # The newest plan, 12:03, is 40 s late: skipped; the next plan is 12:04.
    assert d.move is not None and d.move.plan is None
    assert (
        d.move.next_plan == T0 + timedelta(minutes=4)
        and plans_skipped(d.skips, "max_lateness") == 1
    )
    every = job(catch_up="every_plan", max_plans_per_tick=1, max_lateness="90s")
    d = decide(every, due(T0), T0 + timedelta(minutes=3, seconds=10))
    # 12:00 and 12:01 are more than 90 s late; 12:02 is claimed.
    assert (
        d.move is not None
        and d.move.plan == T0 + timedelta(minutes=2)
        and plans_skipped(d.skips, "max_lateness") == 2
    )


def test_a_plan_inside_its_jitter_is_left_due() -> None:
    spec = job(jitter="59s")
    now = T0 + timedelta(microseconds=1)
    d = decide(spec, due(T0), now)
    if d.move is None:
        assert plans_skipped(d.skips, "superseded") == 0
    else:  # the scope's jitter happened to be under a microsecond
        assert d.move.plan == T0
    later = decide(spec, due(T0), T0 + timedelta(seconds=59))
    assert later.move is not None and later.move.plan == T0


def test_a_window_moved_since_the_put_bounds_the_plan() -> None:
    starts = T0 + timedelta(hours=2)
    d = decide(job(), due(T0, starts_at=starts), T0 + timedelta(seconds=1))
    assert d.move is not None and d.move.plan is None and d.move.next_plan == starts
    ends = T0 + timedelta(minutes=3)
    d = decide(job(), due(T0, ends_at=ends), T0 + timedelta(minutes=10))
    assert d.move is not None
    assert d.move.plan == T0 + timedelta(minutes=2)  # the last plan before ends_at
    assert d.move.next_plan is None


def test_cron_in_a_zone_across_spring_forward() -> None:
    # 02:30 does not exist in Berlin on 2027-03-28: the plan is shifted to 03:00 local.
    cron = due(
        datetime(2027, 3, 27, 1, 30, tzinfo=UTC),
        every_us=None,
        cron="30 2 * * *",
        timezone="Europe/Berlin",
    )
    d = decide(job(), cron, datetime(2027, 3, 27, 1, 30, 1, tzinfo=UTC))
    assert d.move is not None and d.move.next_plan == datetime(2027, 3, 28, 1, 0, tzinfo=UTC)


def test_public_read_result_is_aware_utc() -> None:
    shown = read_schedule("reminder", row(T0, payload={"a": 1}))
    assert shown.next_plan_time == T0 and shown.payload == {"a": 1}
    assert shown.every == timedelta(minutes=1) and shown.to_json()["every"] == 60.0
    assert shown.to_json()["scope"] == {"kind": "user", "id": "1"}


# Specs a bulk put repeats (cadences and crons, zones, windows) and next plans around now.
_SPECS: list[dict[str, Any]] = [
    {"every_us": 60_000_000},
    {"every_us": 420_000_000, "timezone": "Europe/Berlin"},
    {"every_us": None, "cron": "*/5 9-17 * * 1-5", "timezone": "America/New_York"},
    {"every_us": 60_000_000, "ends_at": T0 + timedelta(minutes=20)},
    {"every_us": 60_000_000, "starts_at": T0 + timedelta(minutes=3)},
]


@settings(max_examples=200, deadline=None)
@given(
    catch_up=st.sampled_from(["latest_only", "every_plan"]),
    jitter_s=st.sampled_from([0, 90]),
    max_lateness=st.sampled_from([None, "20m"]),
    schedules=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=len(_SPECS) - 1),  # which spec
            st.sampled_from([0, 1, 7, 95]),  # next plan this many minutes before now
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_a_batch_decides_each_schedule_as_it_would_alone(
    catch_up: str, jitter_s: int, max_lateness: str | None, schedules: list[tuple[int, int]]
) -> None:
    """The batch shares a decision between schedules of one spec and next plan (no jitter):
    each scope still gets its own, as decided alone."""
    j = job(**catch_up_options(catch_up, jitter_s, max_lateness))
    now = T0 + timedelta(minutes=30, seconds=45)  # half a jitter after the newest plan
    rows = [
        due(now - timedelta(minutes=ago), scope_id=str(i), **_SPECS[which])
        for i, (which, ago) in enumerate(schedules)
    ]
    assert decide_schedules(j, rows, now) == [decide(j, r, now) for r in rows]
