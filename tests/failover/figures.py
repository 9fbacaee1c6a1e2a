"""What a failover scenario measured, computed from three sources that survive it: the final
primary's ledger (and ``tx_effects``), the side server's record of every execution, and the
replicas' /healthz samples. Also the checks that must hold.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Check:
    """``figure op value`` must hold."""

    figure: str
    op: str  # "==" or "<="
    value: float

    def holds(self, figures: dict[str, Any]) -> bool:
        got = figures.get(self.figure)
        if got is None:
            return False
        return bool(got == self.value if self.op == "==" else got <= self.value)

    def __str__(self) -> str:
        value = str(self.value).lower() if isinstance(self.value, bool) else f"{self.value:g}"
        return f"{self.figure} {self.op} {value}"


def verdict(figures: dict[str, Any], checks: list[Check]) -> list[str]:
    """The checks that do not hold, each with the figure it got."""
    return [f"{c} (got {figures.get(c.figure)!r})" for c in checks if not c.holds(figures)]


def grid(start: float, end: float) -> list[float]:
    """The plan times of a 1 s schedule in ``[start, end]`` (epoch seconds, whole seconds)."""
    return [float(t) for t in range(math.ceil(start), math.floor(end) + 1)]


def reruns(keys: list[tuple[str, float]]) -> tuple[int, int]:
    """(plans seen more than once, extra occurrences) among ``keys``."""
    counts = Counter(keys)
    return sum(1 for n in counts.values() if n > 1), sum(n - 1 for n in counts.values() if n > 1)


def reruns_finished_before(
    effects: list[dict[str, Any]], before: float, *, same_runner: bool = False
) -> int:
    """Plans run more than once whose first execution had ended before ``before`` (its
    terminal write acknowledged before the fault, give or take the writer's batching); with
    ``same_runner``, only those run again by the replica that had run them."""
    first: dict[tuple[str, float], tuple[float, str]] = {}
    again: set[tuple[str, float]] = set()
    for e in sorted(effects, key=lambda e: e["at"]):
        key = (e["scope"], e["plan"])
        if key not in first:
            first[key] = (e["at"], e["runner"])
        elif not same_runner or e["runner"] == first[key][1]:
            again.add(key)
    return sum(1 for key in again if first[key][0] < before)


def lost(
    plans: list[float], scopes: list[str], succeeded: set[tuple[str, float]], done: set[Any]
) -> int:
    """Plans of ``plans`` x ``scopes`` with neither a SUCCESS row nor an effect."""
    return sum(1 for t in plans for s in scopes if (s, t) not in succeeded and (s, t) not in done)


def healthy_while_stuck(
    samples: list[tuple[float, str, int | None]],
    activity: dict[str, list[float]],
    started: dict[str, float],
    stuck_s: float,
) -> tuple[int, int]:
    """(/healthz 200 answers while their replica had run nothing for ``stuck_s``, samples
    taken while it had). A replica's start counts as activity."""
    healthy = stuck = 0
    for at, runner, status in samples:
        before = [t for t in activity.get(runner, []) if t <= at]
        last = max(before, default=started[runner])
        if at - max(last, started[runner]) >= stuck_s:
            stuck += 1
            healthy += status == 200
    return healthy, stuck


def fencing_regressions(effects: list[dict[str, Any]], fault: float, anew: set[int]) -> int:
    """Executions under a lease handed out after the promotion (``anew``: their tokens, from
    the promoted server's ledger) whose token is no larger than one seen before the fault. A
    lease claimed before the fault whose handler ran on past the promotion (a loaded
    machine), or a transactional run re-run under its lease, keeps its token: not anew."""
    seen = {e["fencing"] for e in effects if e["at"] < fault}
    if not seen:
        return 0
    top = max(seen)
    return sum(1 for e in effects if e["fencing"] in anew and e["fencing"] <= top)


def publish(name: str, figures: dict[str, Any]) -> None:
    """Print ``figures`` on one line; merge them into $PGSCHED_FAILOVER_FIGURES if set."""
    line = json.dumps({"scenario": name, **figures}, sort_keys=True, default=str)
    print(f"\nFAILOVER_FIGURES {line}")
    target = os.environ.get("PGSCHED_FAILOVER_FIGURES")
    if target:
        path = Path(target)
        merged = json.loads(path.read_text()) if path.exists() else {}
        merged[name] = figures
        path.write_text(json.dumps(merged, indent=2, sort_keys=True, default=str) + "\n")
