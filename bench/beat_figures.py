"""The HA beat workload's figures from the consumer's arrivals (pure: no process, no I/O).

Every arrival is one message the consumer read: its arrival time ``t`` (epoch seconds), the
``entry`` (the task's argument), its ``origin`` header (``gen<pid>@host``: the beat that sent
it), its task id, and pgsched's ``plan_time`` header where a pgsched beat sent it.

**The plan a message publishes** (its nominal time):

- pgsched: the ``pgsched_plan_time`` header, on pgsched's epoch-aligned grid of the cadence.
- a plain beat whose entries are on that grid (kind ``grid``: bench/peers/beat_app.py's
  ``on_grid`` schedule): the grid point at or before the arrival, up to a tenth of a cadence
  early, so its lag is counted from the plan's time as pgsched's is.
- plain beat and redbeat: their interval entries are not on a grid (each send is due one
  cadence after the previous send), so the entry's first arrival in the trial sets its grid,
  ``first + k * every``; a message belongs to the grid point at or before it, up to a tenth of
  a cadence early (delivery jitter). The first send's own delay is thereby in the grid's phase:
  these figures count only the delay a plain beat or redbeat adds after its first send, and
  every send of a beat that took over shifted onto the old grid.

A plan is *in the window* when its nominal time is; each entry has ``window / every`` plan
slots there. *Lost*: slots with no message; *duplicated*: slots with more than one; *lag*:
the plan's first arrival less its nominal time.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

EARLY = 0.1  # of a cadence: a message this much before a grid point is that point's plan


@dataclass(frozen=True)
class Window:
    """What a trial measured: ``kind`` of beat, the entries, the window and the kill."""

    kind: str  # pgsched | grid | plain | redbeat
    entries: list[str]
    every_s: float
    start: float  # epoch seconds
    length_s: float
    kill_t: float | None  # epoch seconds, None: no beat killed

    @property
    def end(self) -> float:
        return self.start + self.length_s

    @property
    def on_grid(self) -> bool:
        """The plans are on the epoch-aligned grid of the cadence, not each entry's own."""
        return self.kind in ("pgsched", "grid")


def nominal(arrivals: list[dict[str, Any]], w: Window) -> list[tuple[str, float, dict[str, Any]]]:
    """(entry, nominal time, the arrival) of every message."""
    if w.kind == "pgsched":
        return [
            (a["entry"], datetime.fromisoformat(a["plan_time"]).timestamp(), a) for a in arrivals
        ]
    grid = phases(arrivals)
    out = []
    for a in arrivals:
        first = 0.0 if w.on_grid else grid[a["entry"]]
        k = math.floor((a["t"] - first) / w.every_s + EARLY)
        out.append((a["entry"], first + k * w.every_s, a))
    return out


def phases(arrivals: list[dict[str, Any]]) -> dict[str, float]:
    """Each entry's first arrival."""
    first: dict[str, float] = {}
    for a in arrivals:
        first[a["entry"]] = min(a["t"], first.get(a["entry"], a["t"]))
    return first


def slots(w: Window, phase: float, since: float, until: float) -> int:
    """Grid points ``phase + k * every`` in ``[since, until)``."""
    return math.ceil((until - phase) / w.every_s) - math.ceil((since - phase) / w.every_s)


def percentile(ordered: list[float], q: float) -> float | None:
    """The ``q`` quantile of ``ordered``, linearly interpolated (as percentile_cont)."""
    if not ordered:
        return None
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def figures(arrivals: list[dict[str, Any]], w: Window) -> dict[str, Any]:
    """The trial's figures: plans published, duplicated and lost (overall, before and after
    the kill), publish lag (p50, p99, max), the longest silence of an entry, the sends per
    beat."""
    plans: dict[tuple[str, float], list[float]] = {}
    task_ids: dict[tuple[str, float], set[str]] = {}
    for entry, when, a in nominal(arrivals, w):
        if w.start <= when < w.end:
            plans.setdefault((entry, round(when, 3)), []).append(a["t"])
            task_ids.setdefault((entry, round(when, 3)), set()).add(a["task_id"])
    split = w.kill_t if w.kill_t is not None else w.end
    settled = split - w.every_s
    grid = phases(arrivals)
    phase = {e: 0.0 if w.on_grid else grid.get(e, w.start) for e in w.entries}
    expected_before = sum(slots(w, p, w.start, split) for p in phase.values())
    expected = sum(slots(w, p, w.start, w.end) for p in phase.values())
    before = [k for k in plans if k[1] < split]
    duplicated = [k for k, ts in plans.items() if len(ts) > 1]
    lags = sorted(min(ts) - when for (_, when), ts in plans.items())
    return {
        "expected": expected,
        "published": len(plans),
        "messages": sum(len(ts) for ts in plans.values()),
        "duplicated": len(duplicated),
        # Those sent under more than one task id: a consumer that dedupes by task id still
        # runs them twice (pgsched sends a plan again under its first task id when the beat
        # that sent it died before its row said so).
        "duplicated_new_task_id": sum(1 for ids in task_ids.values() if len(ids) > 1),
        # Plans due a cadence or more before the kill: every beat had its turn to send them.
        "duplicated_a_cadence_before_kill": sum(1 for k in duplicated if k[1] < settled),
        "published_a_cadence_before_kill": sum(1 for k in before if k[1] < settled),
        "lost": expected - len(plans),
        "lost_before_kill": expected_before - len(before),
        "lost_after_kill": (expected - expected_before) - (len(plans) - len(before)),
        "lag_p50_s": _round(percentile(lags, 0.5)),
        "lag_p99_s": _round(percentile(lags, 0.99)),
        "lag_max_s": _round(lags[-1] if lags else None),
        "longest_silence_s": _round(longest_silence(plans, w)),
        "senders": dict(Counter(a["origin"] for a in arrivals if w.start <= a["t"] < w.end)),
    }


def longest_silence(plans: dict[tuple[str, float], list[float]], w: Window) -> float | None:
    """The longest time an entry went without a message inside the window (from the window's
    start, between its plans' messages, to the window's end)."""
    times: dict[str, list[float]] = {}
    for (entry, _), ts in plans.items():
        times.setdefault(entry, []).extend(ts)
    longest = None
    for entry in w.entries:
        edges = [w.start, *sorted(t for t in times.get(entry, []) if t < w.end), w.end]
        gap = max(b - a for a, b in itertools.pairwise(edges))
        longest = gap if longest is None else max(longest, gap)
    return longest


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def median_of(trials: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of each numeric figure over ``trials`` (the ones that ran)."""
    ran = [t for t in trials if t.get("status") == "ok"]
    out: dict[str, Any] = {"rounds": len(ran)}
    if not ran:
        return out
    for key, value in ran[0].items():
        if isinstance(value, int | float) and not isinstance(value, bool) and key != "round":
            values = sorted(t[key] for t in ran if t.get(key) is not None)
            out[key] = percentile(values, 0.5) if values else None
    return out
