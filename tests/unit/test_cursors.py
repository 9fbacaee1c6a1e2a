"""The claim decision of code-defined jobs without a database (``_planning.cursors``): first
sight, catch-up, max_lateness, jitter and a changed schedule, for one due cursor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pgsched._errors import ConfigError
from pgsched._jobs.spec import build_job
from pgsched._planning.cursors import decide_cursor, decide_cursors, due_at, first_plan, spec_key
from pgsched._planning.skips import plans_skipped
from pgsched._records import DueCursor
from tests.support.plans import catch_up_options

# The default first sight a deployment has ("next"), not the suite's "latest".
pytestmark = pytest.mark.first_sight

TICK = timedelta(seconds=1)
US = timedelta(microseconds=1)


def job(**options: Any) -> Any:
    return build_job(lambda run: None, name="report", **options)


def cursor(
    spec: str | None,
    next_plan: datetime | None,
    *,
    seen: datetime,
    last: datetime | None = None,
    ident: str = "1",
) -> DueCursor:
    return DueCursor("tenant", ident, next_plan, spec, seen, last, seen)


def seen_now(j: Any, now: datetime, **cols: Any) -> DueCursor:
    """A cursor as first sight at ``now`` writes it."""
    return cursor(spec_key(j.recurrence), first_plan(j, now, TICK), seen=now, **cols)


# -- first sight --------------------------------------------------------------------------


def test_first_sight_latest_runs_the_newest_plan_already_due_at_once() -> None:
    j = job(cron="0 9 * * 1-5", timezone="Europe/Berlin", first_sight="latest")
    deployed = datetime(2027, 3, 10, 19, 47, tzinfo=UTC)  # Wednesday 20:47 in Berlin
    assert first_plan(j, deployed, TICK) == datetime(2027, 3, 10, 8, 0, tzinfo=UTC)
    decision = decide_cursor(j, spec_key(j.recurrence), seen_now(j, deployed), deployed, TICK)
    assert decision.move.plans == (datetime(2027, 3, 10, 8, 0, tzinfo=UTC),)


def test_first_sight_defaults_to_next_then_to_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert job(every="1h").first_sight == "next"
    monkeypatch.setenv("PGSCHED_FIRST_SIGHT", "latest")
    assert job(every="1h").first_sight == "latest"
    assert job(every="1h", first_sight="next").first_sight == "next"
    monkeypatch.setenv("PGSCHED_FIRST_SIGHT", "soon")
    with pytest.raises(ConfigError, match=r"report.*first_sight.*soon"):
        job(every="1h")


def test_a_weekday_job_deployed_in_the_evening_first_runs_the_next_morning() -> None:
    j = job(cron="0 9 * * 1-5", timezone="Europe/Berlin")
    deployed = datetime(2027, 3, 10, 19, 47, tzinfo=UTC)  # Wednesday 20:47 in Berlin
    assert first_plan(j, deployed, TICK) == datetime(2027, 3, 11, 8, 0, tzinfo=UTC)
    decision = decide_cursor(j, spec_key(j.recurrence), seen_now(j, deployed), deployed, TICK)
    assert decision.move.plans == ()
    assert decision.move.next_plan == datetime(2027, 3, 11, 8, 0, tzinfo=UTC)
    assert (
        plans_skipped(decision.skips, "superseded"),
        plans_skipped(decision.skips, "max_lateness"),
    ) == (0, 0)


def test_a_plan_due_within_the_last_tick_counts_at_first_sight() -> None:
    j = job(cron="0 9 * * *", timezone="UTC")
    nine = datetime(2027, 3, 10, 9, 0, tzinfo=UTC)
    assert first_plan(j, nine + timedelta(milliseconds=300), TICK) == nine
    assert first_plan(j, nine + TICK, TICK) == nine
    assert first_plan(j, nine + TICK + US, TICK) == nine + timedelta(days=1)
    now = nine + timedelta(milliseconds=300)
    decision = decide_cursor(j, spec_key(j.recurrence), seen_now(j, now), now, TICK)
    assert decision.move.plans == (nine,)
    assert decision.move.next_plan == nine + timedelta(days=1)


def test_schedule_delay_moves_first_sight_with_the_due_time() -> None:
    j = job(every="1h", schedule_delay="10m")
    hour = datetime(2027, 3, 10, 9, 0, tzinfo=UTC)
    # the 09:00 plan falls due at 09:10: seen at 09:10:00.5 it still runs
    assert first_plan(j, hour + timedelta(minutes=10, milliseconds=500), TICK) == hour
    assert first_plan(j, hour + timedelta(minutes=11), TICK) == hour + timedelta(hours=1)


# -- catch-up after an outage ----------------------------------------------------------------


def test_latest_only_claims_the_newest_due_plan_and_counts_the_ones_between() -> None:
    j = job(every="1h")
    seen = datetime(2027, 3, 10, 8, 30, tzinfo=UTC)
    now = datetime(2027, 3, 10, 12, 0, 5, tzinfo=UTC)  # down from 08:30 to 12:00
    decision = decide_cursor(j, spec_key(j.recurrence), seen_now(j, seen), now, TICK)
    assert decision.move.plans == (datetime(2027, 3, 10, 12, 0, tzinfo=UTC),)
    assert plans_skipped(decision.skips, "superseded") == 3  # 09:00, 10:00, 11:00
    assert decision.move.next_plan == datetime(2027, 3, 10, 13, 0, tzinfo=UTC)


def test_every_plan_loses_nothing_after_first_sight() -> None:
    j = job(every="1h", catch_up="every_plan", max_plans_per_tick=2, overlap="allow")
    seen = datetime(2027, 3, 10, 8, 30, tzinfo=UTC)
    now = datetime(2027, 3, 10, 12, 0, 5, tzinfo=UTC)
    spec = spec_key(j.recurrence)
    first = decide_cursor(j, spec, seen_now(j, seen), now, TICK, room=10)
    nine = datetime(2027, 3, 10, 9, 0, tzinfo=UTC)
    assert first.move.plans == (nine, nine + timedelta(hours=1))
    moved = cursor(spec, first.move.next_plan, seen=seen, last=first.move.plans[-1])
    second = decide_cursor(j, spec, moved, now, TICK, room=10)
    assert second.move.plans == (nine + timedelta(hours=2), nine + timedelta(hours=3))
    assert second.move.next_plan == nine + timedelta(hours=4)


def test_every_plan_under_forbid_claims_one_plan_at_a_time() -> None:
    j = job(every="1h", catch_up="every_plan", max_plans_per_tick=5)
    seen = datetime(2027, 3, 10, 8, 30, tzinfo=UTC)
    now = datetime(2027, 3, 10, 12, 0, 5, tzinfo=UTC)
    decision = decide_cursor(j, spec_key(j.recurrence), seen_now(j, seen), now, TICK, room=10)
    assert decision.move.plans == (datetime(2027, 3, 10, 9, 0, tzinfo=UTC),)


def test_every_plan_skips_plans_older_than_its_window() -> None:
    j = job(every="1h", catch_up="every_plan", max_plans_per_tick=1, catch_up_window="2h")
    seen = datetime(2027, 3, 10, 0, 30, tzinfo=UTC)
    now = datetime(2027, 3, 10, 12, 0, 5, tzinfo=UTC)
    decision = decide_cursor(j, spec_key(j.recurrence), seen_now(j, seen), now, TICK)
    assert decision.move.plans == (datetime(2027, 3, 10, 11, 0, tzinfo=UTC),)


def test_max_lateness_skips_and_counts() -> None:
    now = datetime(2027, 3, 10, 12, 30, tzinfo=UTC)
    seen = datetime(2027, 3, 10, 8, 30, tzinfo=UTC)
    latest = job(every="1h", max_lateness="10m")
    d = decide_cursor(latest, spec_key(latest.recurrence), seen_now(latest, seen), now, TICK)
    assert (d.move.plans, plans_skipped(d.skips, "max_lateness")) == ((), 1)
    assert d.move.next_plan == datetime(2027, 3, 10, 13, 0, tzinfo=UTC)
    every = job(every="1h", catch_up="every_plan", max_plans_per_tick=1, max_lateness="2h")
    d = decide_cursor(every, spec_key(every.recurrence), seen_now(every, seen), now, TICK)
    assert d.move.plans == (datetime(2027, 3, 10, 11, 0, tzinfo=UTC),)
    assert plans_skipped(d.skips, "max_lateness") == 2  # 09:00 and 10:00


# -- jitter, room, a changed schedule, the upgrade path --------------------------------------------


def test_a_plan_inside_its_jitter_waits_with_the_cursor_due_after_it() -> None:
    j = job(every="1h", jitter="30m")
    plan = datetime(2027, 3, 10, 12, 0, tzinfo=UTC)
    due = due_at(j, "tenant", "1", plan)
    assert due is not None and plan <= due < plan + timedelta(minutes=30)
    seen = datetime(2027, 3, 10, 8, 30, tzinfo=UTC)
    spec = spec_key(j.recurrence)
    early = decide_cursor(j, spec, seen_now(j, seen), plan, TICK)  # an outage: 09:00..12:00
    assert early.move.plans == () or due == plan
    assert early.move.next_plan == plan and early.move.due_at == due
    later = decide_cursor(j, spec, cursor(spec, plan, seen=seen), due, TICK)
    assert later.move.plans == (plan,)


def test_room_bounds_the_plans_of_a_batch() -> None:
    j = job(every="1h", catch_up="every_plan", max_plans_per_tick=3, overlap="allow")
    seen = datetime(2027, 3, 10, 8, 30, tzinfo=UTC)
    now = datetime(2027, 3, 10, 12, 0, 5, tzinfo=UTC)
    rows = [seen_now(j, seen, ident=str(i)) for i in range(3)]
    decisions = decide_cursors(j, rows, now, TICK, room=4)
    assert [len(d.move.plans) for d in decisions] == [3, 1]  # the third cursor waits


def test_a_changed_schedule_resumes_after_the_latest_claimed_plan() -> None:
    old, new = job(every="1h"), job(every="30m")
    assert spec_key(old.recurrence) != spec_key(new.recurrence)
    seen = datetime(2027, 3, 10, 8, 0, tzinfo=UTC)
    last = datetime(2027, 3, 10, 11, 0, tzinfo=UTC)
    stored = cursor(spec_key(old.recurrence), last + timedelta(hours=1), seen=seen, last=last)
    now = datetime(2027, 3, 10, 11, 45, tzinfo=UTC)
    d = decide_cursor(new, spec_key(new.recurrence), stored, now, TICK)
    assert d.move.plans == (datetime(2027, 3, 10, 11, 30, tzinfo=UTC),)
    assert d.move.next_plan == datetime(2027, 3, 10, 12, 0, tzinfo=UTC)


def test_a_scope_from_an_earlier_version_resumes_after_its_latest_plan() -> None:
    """First sight of a scope with scheduled plans in the ledger writes no spec and its
    latest plan: the claim resumes after it, under the job's catch-up."""
    j = job(every="1h", catch_up="every_plan", max_plans_per_tick=1)
    now = datetime(2027, 3, 10, 12, 0, 5, tzinfo=UTC)
    last = datetime(2027, 3, 10, 10, 0, tzinfo=UTC)
    upgraded = cursor(None, None, seen=now, last=last)
    d = decide_cursor(j, spec_key(j.recurrence), upgraded, now, TICK)
    assert d.move.plans == (datetime(2027, 3, 10, 11, 0, tzinfo=UTC),)
    latest = job(every="1h")
    d = decide_cursor(latest, spec_key(latest.recurrence), upgraded, now, TICK)
    assert d.move.plans == (datetime(2027, 3, 10, 12, 0, tzinfo=UTC),)
    assert plans_skipped(d.skips, "superseded") == 1
    caught_up = cursor(None, None, seen=now, last=datetime(2027, 3, 10, 12, 0, tzinfo=UTC))
    d = decide_cursor(latest, spec_key(latest.recurrence), caught_up, now, TICK)
    assert d.move.plans == () and d.move.next_plan == datetime(2027, 3, 10, 13, 0, tzinfo=UTC)


def test_cron_spec_key_tells_dst_options_apart() -> None:
    a = job(cron="30 2 * * *", timezone="Europe/Berlin")
    b = job(cron="30 2 * * *", timezone="Europe/Berlin", dst_skipped="skip")
    assert spec_key(a.recurrence) != spec_key(b.recurrence)


# -- a cursor driven through many claims: a model check ---------------------------------------


def _drive(j: Any, seen: datetime, gaps: list[int]) -> tuple[list[datetime], datetime]:
    """Claims at ``seen`` + each cumulative gap (seconds), applying every move as the
    database would; returns the plans claimed and the last claim's time."""
    spec = spec_key(j.recurrence)
    row = seen_now(j, seen)
    claimed: list[datetime] = []
    now = seen
    for gap in gaps:
        now += timedelta(seconds=gap)
        # claimed again at once while a full batch leaves the cursor due (the runtime's
        # "again"); a cursor not due is not read at all
        while row.next_plan_time is not None and row.next_plan_time <= now:
            move = decide_cursor(j, spec, row, now, TICK, room=1000).move
            claimed.extend(move.plans)
            last = max(move.plans, default=row.last_plan_time)
            row = cursor(spec, move.next_plan, seen=seen, last=last)
            if not move.plans:
                break
    return claimed, now


@settings(max_examples=200, deadline=None)
@given(
    every_s=st.integers(min_value=1, max_value=900),
    offset_s=st.integers(min_value=0, max_value=86_400),
    gaps=st.lists(st.integers(min_value=0, max_value=3_600), min_size=1, max_size=30),
)
def test_every_plan_claims_each_plan_after_first_sight_once_in_order(
    every_s: int, offset_s: int, gaps: list[int]
) -> None:
    j = job(
        every=timedelta(seconds=every_s),
        catch_up="every_plan",
        max_plans_per_tick=1000,
        overlap="allow",
        catch_up_window="30d",
    )
    seen = datetime(2027, 3, 10, tzinfo=UTC) + timedelta(seconds=offset_s, microseconds=1)
    claimed, now = _drive(j, seen, gaps)
    first = first_plan(j, seen, TICK)
    assert first is not None
    expected = [first, *j.recurrence.plans_between(first, now)] if first <= now else []
    assert claimed == expected


@settings(max_examples=200, deadline=None)
@given(
    every_s=st.integers(min_value=1, max_value=900),
    offset_s=st.integers(min_value=0, max_value=86_400),
    gaps=st.lists(st.integers(min_value=0, max_value=3_600), min_size=1, max_size=30),
)
def test_latest_only_claims_rising_plans_never_from_before_first_sight(
    every_s: int, offset_s: int, gaps: list[int]
) -> None:
    j = job(every=timedelta(seconds=every_s))
    seen = datetime(2027, 3, 10, tzinfo=UTC) + timedelta(seconds=offset_s, microseconds=1)
    claimed, now = _drive(j, seen, gaps)
    assert claimed == sorted(set(claimed))
    assert all(p >= seen - TICK for p in claimed)
    newest = j.recurrence.latest_at_or_before(now)
    if claimed and newest >= (first_plan(j, seen, TICK) or now):
        assert claimed[-1] <= newest


@settings(max_examples=200, deadline=None)
@given(
    schedule=st.sampled_from([{"every": "7m"}, {"cron": "*/5 9-17 * * 1-5"}]),
    catch_up=st.sampled_from(["latest_only", "every_plan"]),
    jitter_s=st.sampled_from([0, 90]),
    max_lateness=st.sampled_from([None, "20m"]),
    cursors=st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=3),  # which next plan (3: none stored)
            st.booleans(),  # stored from another schedule
            st.integers(min_value=0, max_value=7_200),  # seen this many seconds ago
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_a_batch_decides_each_cursor_as_it_would_alone(
    schedule: dict[str, str],
    catch_up: str,
    jitter_s: int,
    max_lateness: str | None,
    cursors: list[tuple[int, bool, int]],
) -> None:
    """The batch shares a decision between cursors that would get the same one (the same
    first unclaimed plan, no jitter): each scope still gets its own, as decided alone."""
    j = job(**schedule, **catch_up_options(catch_up, jitter_s, max_lateness))
    now = datetime(2027, 3, 10, 12, 1, 30, tzinfo=UTC)
    spec = spec_key(j.recurrence)
    nexts = [now - timedelta(minutes=m) for m in (0, 7, 95)]
    rows = [
        cursor(
            "old" if other else spec,
            nexts[which] if which < 3 else None,
            seen=now - timedelta(seconds=ago),
            ident=str(i),
        )
        for i, (which, other, ago) in enumerate(cursors)
    ]
    alone = [decide_cursor(j, spec, row, now, TICK, room=1_000) for row in rows]
    assert decide_cursors(j, rows, now, TICK, room=1_000) == alone
