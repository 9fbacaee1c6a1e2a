"""The spans of skipped plans the claim decisions carry, without a database
(``_planning.skips``, ``cursors``, ``dynamic``): which plans, why, how many, and the plan before
each span (which lets the claim extend the one recorded before it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pgsched._jobs.spec import build_job
from pgsched._planning.cursors import decide_cursor, decide_cursors, spec_key
from pgsched._planning.dynamic import decide
from pgsched._planning.recurrence import CadenceRecurrence, CronRecurrence
from pgsched._planning.skips import (
    PauseWindow,
    described_recurrence,
    later_window,
    pause_window,
    plans_skipped,
)
from pgsched._records import DueCursor, DueSchedule, Skip

pytestmark = pytest.mark.first_sight

TICK = timedelta(seconds=1)
H = timedelta(hours=1)
T = datetime(2027, 3, 10, 8, 0, tzinfo=UTC)


def job(**options: Any) -> Any:
    return build_job(lambda run: None, name="report", **options)


def due(
    j: Any,
    next_plan: datetime,
    paused_at: datetime | None = None,
    resumed_at: datetime | None = None,
) -> DueCursor:
    """A cursor due at ``next_plan`` of job ``j``, with the job's pause window."""
    key = spec_key(j.recurrence)
    return DueCursor("tenant", "1", next_plan, key, T - H, None, T, "", paused_at, resumed_at)


def test_latest_only_after_downtime_is_one_superseded_span_with_the_plan_before_it() -> None:
    j = job(every="1h")
    d = decide_cursor(j, spec_key(j.recurrence), due(j, T + H), T + 4 * H + TICK, TICK)
    assert d.move.plans == (T + 4 * H,)
    assert d.skips == (Skip("tenant", "1", "superseded", T + H, T + 3 * H, 3, T),)
    assert plans_skipped(d.skips, "superseded") == 3


def test_a_claim_that_skips_nothing_carries_no_span() -> None:
    j = job(every="1h")
    d = decide_cursor(j, spec_key(j.recurrence), due(j, T + H), T + H + TICK, TICK)
    assert (d.move.plans, d.skips) == ((T + H,), ())


def test_max_lateness_under_latest_only_spans_the_late_plan_and_the_ones_before() -> None:
    j = job(every="1h", max_lateness="10m")
    d = decide_cursor(j, spec_key(j.recurrence), due(j, T + H), T + 3 * H + 20 * 60 * TICK, TICK)
    assert d.move.plans == ()
    assert [(s.reason, s.first, s.last, s.plans) for s in d.skips] == [
        ("superseded", T + H, T + 2 * H, 2),
        ("max_lateness", T + 3 * H, T + 3 * H, 1),
    ]


def test_every_plan_spans_the_late_plans_and_those_past_the_catch_up_window() -> None:
    j = job(
        every="1h",
        catch_up="every_plan",
        catch_up_window="3h",
        max_lateness="90m",
        max_plans_per_tick=5,
        overlap="allow",
    )
    now = T + 6 * H + TICK
    d = decide_cursor(j, spec_key(j.recurrence), due(j, T + H), now, TICK)
    assert [(s.reason, s.first, s.last, s.plans) for s in d.skips] == [
        ("superseded", T + H, T + 3 * H, 3),  # older than the window (from 11:00:01)
        ("max_lateness", T + 4 * H, T + 4 * H, 1),  # older than 12:30:01
    ]
    assert d.move.plans == (T + 5 * H,)  # one at a time (room=1)


@pytest.mark.parametrize("catch_up", ["latest_only", "every_plan"])
def test_plans_due_while_paused_are_a_paused_span_whatever_the_catch_up(catch_up: str) -> None:
    options = {"catch_up": catch_up, "max_plans_per_tick": 5, "overlap": "allow"}
    j = job(every="1h", **(options if catch_up == "every_plan" else {}))
    pause = {"paused_at": T + 30 * 60 * TICK, "resumed_at": T + 3 * H + 30 * 60 * TICK}
    now = T + 4 * H + TICK
    d = decide_cursor(j, spec_key(j.recurrence), due(j, T + H, **pause), now, TICK)
    assert [(s.reason, s.first, s.last, s.plans, s.previous) for s in d.skips] == [
        ("paused", T + H, T + 3 * H, 3, T)
    ]
    assert d.move.plans == (T + 4 * H,)


def test_a_resume_before_the_next_plan_moves_the_cursor_to_it() -> None:
    j = job(every="1h")
    pause = {"paused_at": T + 30 * 60 * TICK, "resumed_at": T + H + 30 * 60 * TICK}
    now = T + H + 31 * 60 * TICK
    d = decide_cursor(j, spec_key(j.recurrence), due(j, T + H, **pause), now, TICK)
    assert [(s.reason, s.first, s.plans) for s in d.skips] == [("paused", T + H, 1)]
    assert (d.move.plans, d.move.next_plan) == ((), T + 2 * H)


def test_latest_only_supersedes_the_plans_due_before_the_pause() -> None:
    j = job(every="1h")
    pause = {"paused_at": T + H + 30 * 60 * TICK, "resumed_at": T + 2 * H + 30 * 60 * TICK}
    d = decide_cursor(j, spec_key(j.recurrence), due(j, T + H, **pause), T + 3 * H + TICK, TICK)
    assert [(s.reason, s.first, s.last) for s in d.skips] == [
        ("superseded", T + H, T + H),
        ("paused", T + 2 * H, T + 2 * H),
    ]
    assert d.move.plans == (T + 3 * H,)


def test_every_plan_claims_the_plans_due_before_the_pause_first() -> None:
    j = job(every="1h", catch_up="every_plan", max_plans_per_tick=5, overlap="allow")
    pause = {"paused_at": T + H + 30 * 60 * TICK, "resumed_at": T + 3 * H + 30 * 60 * TICK}
    d = decide_cursor(j, spec_key(j.recurrence), due(j, T + H, **pause), T + 4 * H + TICK, TICK)
    assert (d.move.plans, d.skips) == ((T + H,), ())
    assert d.move.next_plan is not None
    after = decide_cursor(
        j, spec_key(j.recurrence), due(j, d.move.next_plan, **pause), T + 4 * H + TICK, TICK
    )
    assert [(s.reason, s.first, s.last) for s in after.skips] == [("paused", T + 2 * H, T + 3 * H)]
    assert after.move.plans == (T + 4 * H,)


def test_a_pause_the_cursor_is_past_changes_nothing() -> None:
    j = job(every="1h")
    pause = {"paused_at": T - 2 * H, "resumed_at": T - H}
    d = decide_cursor(j, spec_key(j.recurrence), due(j, T + H, **pause), T + H + TICK, TICK)
    assert (d.move.plans, d.skips) == ((T + H,), ())


def test_a_batch_gives_each_scope_its_own_spans() -> None:
    j = job(every="1h")
    rows = [due(j, T + H)._replace(scope_id=str(n)) for n in range(3)]
    decisions = decide_cursors(j, rows, T + 3 * H + TICK, TICK, 10)
    assert [[(s.id, s.plans) for s in d.skips] for d in decisions] == [
        [("0", 2)],
        [("1", 2)],
        [("2", 2)],
    ]


def test_cron_spans_count_the_cron_plans() -> None:
    j = job(cron="0 9 * * 1-5", timezone="Europe/Berlin")
    monday = datetime(2027, 3, 8, 8, 0, tzinfo=UTC)  # 09:00 in Berlin
    d = decide_cursor(j, spec_key(j.recurrence), due(j, monday), monday + 7 * 24 * H, TICK)
    (span,) = d.skips
    assert (span.reason, span.first, span.plans) == ("superseded", monday, 5)  # Mon to Fri
    assert span.previous == datetime(2027, 3, 5, 8, 0, tzinfo=UTC)  # the Friday before


def schedule(next_plan: datetime, **cols: Any) -> DueSchedule:
    base: dict[str, Any] = {
        "scope_kind": "user",
        "scope_id": "9",
        "every_us": 3_600_000_000,
        "cron": None,
        "timezone": "UTC",
        "starts_at": None,
        "ends_at": None,
        "next_plan_time": next_plan,
        "now": T,
    }
    base.update(cols)
    return DueSchedule(**base)


def test_a_schedule_whose_window_starts_later_spans_its_due_plans_outside_it() -> None:
    j = job(dynamic=True)
    d = decide(j, schedule(T + H, starts_at=T + 10 * H), T + 3 * H + TICK)
    assert d.move is not None and d.move.plan is None and d.move.next_plan == T + 10 * H
    assert [(s.reason, s.first, s.last, s.plans) for s in d.skips] == [
        ("outside_window", T + H, T + 3 * H, 3)
    ]


def test_a_schedule_paused_on_its_own_spans_the_plans_due_meanwhile() -> None:
    j = job(dynamic=True)
    row = schedule(T + H, own_paused_at=T + 30 * 60 * TICK, own_resumed_at=T + 2 * H + TICK)
    d = decide(j, row, T + 3 * H + TICK)
    assert [(s.reason, s.first, s.last, s.plans) for s in d.skips] == [
        ("paused", T + H, T + 2 * H, 2)
    ]
    assert d.move is not None and d.move.plan == T + 3 * H


def test_a_schedule_under_latest_only_records_the_superseded_span() -> None:
    j = job(dynamic=True)
    d = decide(j, schedule(T + H), T + 4 * H + TICK)
    assert d.move is not None and d.move.plan == T + 4 * H
    assert d.skips == (Skip("user", "9", "superseded", T + H, T + 3 * H, 3, T),)


def test_pause_windows() -> None:
    assert pause_window(T, None) is None  # still paused
    assert pause_window(T + H, T) is None  # a resume before the pause: an older window
    a, b = PauseWindow(T, T + 2 * H), PauseWindow(T + H, T + 3 * H)
    assert later_window(a, b) == PauseWindow(T, T + 3 * H)  # overlapping: stretched back
    c = PauseWindow(T + 5 * H, T + 6 * H)
    assert later_window(a, c) == c
    assert later_window(None, c) == c


def test_a_recorded_schedule_reads_back_as_its_recurrence() -> None:
    from zoneinfo import ZoneInfo

    every = CadenceRecurrence(timedelta(seconds=90))
    cron = CronRecurrence("0 9 * * 1-5", ZoneInfo("Europe/Berlin"))
    for recurrence in (every, cron):
        back = described_recurrence(recurrence.describe())
        assert back is not None and back.describe() == recurrence.describe()
    assert described_recurrence("planner=Hook") is None
    assert described_recurrence("dynamic") is None
    assert described_recurrence("cron 'nonsense' UTC") is None


def test_latest_only_runs_the_plan_due_before_the_pause_when_none_is_due_since() -> None:
    # Paused and resumed within an hour, with the 09:00 plan unclaimed from before the pause
    # (a job paused just after it fell due): the newest plan due that was not paused runs.
    j = job(every="1h")
    pause = {"paused_at": T + H + 60 * TICK, "resumed_at": T + H + 120 * TICK}
    d = decide_cursor(j, spec_key(j.recurrence), due(j, T + H, **pause), T + H + 121 * TICK, TICK)
    assert (d.move.plans, d.skips) == ((T + H,), ())


# 2027-03-12 is a Friday: the weekend's plans of a weekday calendar are `excluded`.
FRI = datetime(2027, 3, 12, 9, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def calendar_job(**options: Any) -> Any:
    from pgsched import Calendar

    return job(cron="0 9 * * *", calendar=Calendar(), **options)


def after_claim(j: Any, last: datetime, next_plan: datetime) -> DueCursor:
    """A cursor whose latest claimed plan is ``last``, due at ``next_plan``."""
    key = spec_key(j.recurrence)
    return DueCursor("tenant", "1", next_plan, key, last - H, last, next_plan)


def test_the_claim_after_a_weekend_records_its_plans_as_one_excluded_span() -> None:
    j = calendar_job()
    d = decide_cursor(
        j, spec_key(j.recurrence), after_claim(j, FRI, FRI + 3 * DAY), FRI + 3 * DAY + TICK, TICK
    )
    assert d.move.plans == (FRI + 3 * DAY,)
    assert d.skips == (Skip("tenant", "1", "excluded", FRI + DAY, FRI + 2 * DAY, 2, FRI),)


def test_a_claim_on_a_working_day_after_a_working_day_records_nothing_excluded() -> None:
    j = calendar_job()
    thu = FRI - DAY
    d = decide_cursor(j, spec_key(j.recurrence), after_claim(j, thu, FRI), FRI + TICK, TICK)
    assert (d.move.plans, d.skips) == ((FRI,), ())


def test_a_moving_calendar_records_no_excluded_plan_it_moved() -> None:
    j = calendar_job(on_excluded="next_working_day")
    mon = FRI + 3 * DAY
    assert j.recurrence.plans_between(FRI, mon) == [mon]  # Saturday's and Sunday's: one plan
    d = decide_cursor(j, spec_key(j.recurrence), after_claim(j, FRI, mon), mon + TICK, TICK)
    assert (d.move.plans, d.skips) == ((mon,), ())


def test_excluded_spans_of_many_scopes_are_each_scopes_own() -> None:
    j = calendar_job()
    mon = FRI + 3 * DAY
    rows = [after_claim(j, FRI, mon)._replace(scope_id=str(i)) for i in range(3)]
    made = decide_cursors(j, rows, mon + TICK, TICK, 10)
    assert [(s.id, s.reason, s.plans) for d in made for s in d.skips] == [
        (str(i), "excluded", 2) for i in range(3)
    ]


def test_a_superseded_catch_up_over_a_weekend_keeps_the_two_reasons_apart() -> None:
    j = calendar_job()
    tue = FRI + 4 * DAY
    d = decide_cursor(
        j, spec_key(j.recurrence), after_claim(j, FRI, FRI + 3 * DAY), tue + TICK, TICK
    )
    assert d.move.plans == (tue,)
    assert sorted((s.reason, s.first, s.plans) for s in d.skips) == [
        ("excluded", FRI + DAY, 2),
        ("superseded", FRI + 3 * DAY, 1),
    ]
