"""The benchmark's registry: every workload and every compared configuration, in one place.

The workloads of ``python -m bench`` (:mod:`bench.workloads`), its contenders of code-defined
jobs (:mod:`bench.schedulers`) and of schedules as data (:mod:`bench.dynamic_schedulers`),
and the configurations of ``python -m bench.beat``. The modules that run, measure, chart and
report them read these from here; the helpers they share (the results folder, the log, the
peers' virtualenvs) are in :mod:`bench.shared`. Standard library only at import: the chart
reads the labels from the peers' virtualenv.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.dynamic_schedulers import CeleryBeat, Dbos, DynamicContender, PgschedDynamic
from bench.schedulers import (
    Contender,
    Oban,
    Pgqueuer,
    Pgsched,
    PgschedBatch,
    Procrastinate,
    RawHandlerLimit,
    RawLimit,
    SeedDesign,
)
from bench.workloads import WORKLOADS, Workload

__all__ = [
    "ALL_KEYS",
    "CEILINGS",
    "CONFIGS",
    "DYNAMIC",
    "ORDER",
    "REGISTRY",
    "WORKLOADS",
    "BeatConfig",
    "contender_for",
    "label",
]

REGISTRY: dict[str, Contender] = {
    c.key: c
    for c in (
        RawLimit(),
        RawHandlerLimit(),
        Pgsched(),
        PgschedBatch(),
        SeedDesign(),
        Pgqueuer(),
        Procrastinate(),
        Oban(),
    )
}
ORDER = tuple(REGISTRY)
CEILINGS = {k: c.ceiling for k, c in REGISTRY.items() if c.ceiling}  # key -> JSON suffix

DYNAMIC: dict[str, DynamicContender] = {c.key: c for c in (PgschedDynamic(), Dbos(), CeleryBeat())}

# Every scheduler key, in the table's and the chart's order.
ALL_KEYS = (*ORDER, *(k for k in DYNAMIC if k not in REGISTRY))


def label(key: str) -> str:
    """The table's and the chart's name of ``key`` (the key itself if unknown)."""
    contender = REGISTRY.get(key) or DYNAMIC.get(key)
    return contender.label if contender else key


def contender_for(wl: Workload, key: str) -> Contender | DynamicContender | None:
    """The contender ``key`` of ``wl``'s kind (schedules as data or not), or None: a
    scheduler without schedules as data does not appear in workloads g-i, nor the peers
    with only schedules as data in a-f. The limits also run h (10,000 plans due at one
    minute is the shape of c), as scopes of a code-defined cadence, so pgsched's dynamic claims
    get ratios to them from the same run."""
    if wl.schedules == "due" and key in CEILINGS:
        return REGISTRY[key]
    if wl.schedules:
        return DYNAMIC.get(key)
    return REGISTRY.get(key)


@dataclass(frozen=True)
class BeatConfig:
    """One configuration of ``python -m bench.beat``: which beat, how many of them, in which
    virtualenv."""

    key: str
    label: str
    kind: str  # pgsched | grid (a plain beat, entries on pgsched's grid) | plain | redbeat
    beats: int
    venv: str = ""  # "": the bench's interpreter; "peers": bench/.venv-peers (celery-redbeat)

    def scheduler_args(self, schedule_file: Path) -> list[str]:
        if self.kind == "pgsched":
            return ["-S", "pgsched"]
        if self.kind == "redbeat":
            return ["-S", "redbeat.RedBeatScheduler"]
        return ["-s", str(schedule_file)]  # PersistentScheduler, a schedule file of its own


CONFIGS = {
    c.key: c
    for c in (
        BeatConfig("pgsched", "pgsched: 3 beats (`celery beat -S pgsched`)", "pgsched", 3),
        BeatConfig("beat", "one plain `celery beat`", "plain", 1),
        BeatConfig("beat_grid", "one plain `celery beat`, entries on pgsched's grid", "grid", 1),
        BeatConfig("beat2", "two plain `celery beat`s", "plain", 2),
        BeatConfig("redbeat", "celery-redbeat 2.4.2: 3 beats", "redbeat", 3, venv="peers"),
    )
}
