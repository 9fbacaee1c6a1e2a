"""The plans a claim decides not to run, the pure part: spans of one scope's consecutive
skipped plans per reason, and the pause window a claim after a resume skips. No I/O: the
claim decisions (``cursors``, ``dynamic``) build them and the claimer writes them in its
transaction.

- A span is its first and last plans, how many (counted up to :data:`SKIP_COUNT_CAP` for
  recurrences that are not cadences) and the scope's plan before its first, so the claimer can
  extend the span recorded before it.
- A plan that fell due (its plan plus ``schedule_delay``) at or after the job's (or
  schedule's) last pause and before the resume that ended it is skipped as ``paused``,
  whatever the catch-up mode.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .._records import Skip
from .._times import US, parse_duration
from .calendars import skips_excluded
from .recurrence import CadenceRecurrence, CronRecurrence, Recurrence, count_plans_between

REASONS = (
    "superseded",
    "max_lateness",
    "paused",
    "overlap",
    "excluded",
    "outside_window",
    "before_first_sight",
    "no_replica",
)
# The reasons a claim records; before_first_sight and no_replica are derived when read
# (the cursor's first sight, the replicas table), overlap is reserved.
RECORDED = ("superseded", "max_lateness", "paused", "outside_window", "excluded")
SKIP_COUNT_CAP = 10_000
# How far back a claim looks for plans its calendar excluded (a cursor re-planned after
# a long pause records no older ones): a calendar's own search bound.
EXCLUDED_LOOKBACK = timedelta(days=800)


class PauseWindow(NamedTuple):
    """From a pause to the resume that ended it: plans due in between are not run."""

    start: datetime
    end: datetime


def pause_window(paused_at: datetime | None, resumed_at: datetime | None) -> PauseWindow | None:
    """The last pause of a job or schedule that a resume ended (None: none, or still paused)."""
    if paused_at is None or resumed_at is None or resumed_at <= paused_at:
        return None
    return PauseWindow(paused_at, resumed_at)


def later_window(a: PauseWindow | None, b: PauseWindow | None) -> PauseWindow | None:
    """Of a job's and a schedule's pause windows, the one a claim honours: the later one,
    stretched back over the other when they overlap."""
    if a is None or b is None:
        return a or b
    first, last = (a, b) if a.end <= b.end else (b, a)
    if first.end >= last.start:
        return PauseWindow(min(first.start, last.start), last.end)
    return last


def span(
    recurrence: Recurrence,
    scope: tuple[str, str],
    reason: str,
    first: datetime,
    last: datetime,
) -> Skip:
    """The span of ``recurrence``'s plans from ``first`` to ``last`` (both plans) of a scope."""
    plans = 1 + count_plans_between(recurrence, first, last + US, SKIP_COUNT_CAP - 1)
    previous = recurrence.latest_at_or_before(first - US)
    return Skip(scope[0], scope[1], reason, first, last, plans, previous)


def spans_between(
    recurrence: Recurrence,
    scope: tuple[str, str],
    reason: str,
    first: datetime | None,
    before: datetime | None,
) -> list[Skip]:
    """The span of the plans from ``first`` up to (not including) the plan ``before`` (None:
    no span when there is none before it)."""
    if first is None or before is None or before <= first:
        return []
    last = recurrence.latest_at_or_before(before - US)
    if last is None or last < first:
        return []
    return [span(recurrence, scope, reason, first, last)]


def excluded_spans(
    recurrence: Recurrence, scope: tuple[str, str], after: datetime, upto: datetime
) -> list[Skip]:
    """The spans of plans in ``(after, upto]`` that ``recurrence``'s calendar skips
    (``excluded``): its inner plans on each run of excluded days. None unless ``recurrence``
    is a calendar's with ``on_excluded="skip"`` (a moved plan is not skipped)."""
    if not skips_excluded(recurrence):
        return []
    after = max(after, upto - EXCLUDED_LOOKBACK)
    inner, out = recurrence.inner, []
    for start, end in recurrence.excluded_runs(after, upto):
        first = inner.next_after(max(start - US, after))
        if first is None or first >= end or first > upto:
            continue
        last = inner.latest_at_or_before(min(end - US, upto))
        if last is not None and last >= first:
            out.append(span(inner, scope, "excluded", first, last))
    return out


def rescoped(skips: tuple[Skip, ...], kind: str, ident: str) -> tuple[Skip, ...]:
    """Spans decided for another scope of the same plans, for this one."""
    return tuple(s._replace(kind=kind, id=ident) for s in skips)


def past_pause(
    step: Callable[[datetime], datetime | None],
    recurrence: Recurrence,
    scope: tuple[str, str],
    first: datetime,
    window: tuple[PauseWindow, timedelta, bool],
) -> tuple[datetime | None, list[Skip]]:
    """The first plan due at or after the resume, and the spans skipped from ``first`` up to
    it: plans due during the pause (``paused``) and, with ``supersede`` (latest_only), the
    ones due before it (``superseded``: later plans replace them). ``step``: the scope's next
    plan after an instant (its window applied); ``window``: the pause, ``schedule_delay`` and
    ``supersede``."""
    pause, delay, supersede = window
    skips: list[Skip] = []
    if supersede:
        skips += spans_between(recurrence, scope, "superseded", first, pause.start - delay)
    in_pause = first if first + delay >= pause.start else step(pause.start - delay - US)
    skips += spans_between(recurrence, scope, "paused", in_pause, pause.end - delay)
    return step(pause.end - delay - US), skips


def described_recurrence(text: str | None) -> Recurrence | None:
    """The recurrence a replica recorded as ``describe()`` (``every 5m``, ``cron '0 9 * * *'
    Europe/Berlin``) for a caller without the job's code; None for a planner hook, a dynamic
    job or text it cannot read (its DST overrides are not recorded: the defaults apply)."""
    if not text:
        return None
    try:
        if text.startswith("every "):
            return CadenceRecurrence(parse_duration(text[6:], field="every", allow_zero=False))
        match = re.fullmatch(r"cron '(.+)' (\S+)", text)
        if match:
            return CronRecurrence(match.group(1), ZoneInfo(match.group(2)))
    except (ValueError, KeyError, ZoneInfoNotFoundError):  # ConfigError is a ValueError
        return None
    return None


def plans_skipped(skips: Iterable[Skip], reason: str) -> int:
    """How many plans ``skips`` passed over for ``reason``."""
    return sum(s.plans for s in skips if s.reason == reason)
