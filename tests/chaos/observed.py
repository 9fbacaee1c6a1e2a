"""What the chaos checks read once a scenario's replicas have stopped (:class:`Observed`), and
the small readings shared by the checks: claims in the audit history, percentiles."""

from __future__ import annotations

import contextlib
import json
import math
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.chaos.harness import ChaosRun

Row = dict[str, Any]
Lease = tuple[uuid.UUID, uuid.UUID]  # (execution id, lease token)


@dataclass
class Observed:
    """What the checks read once the replicas have stopped: pgsched's rows (the seed's left
    out), the audit history, the ledger, the handlers' notices and the replicas' logs."""

    rows: list[Row]
    history: list[Row]
    ledger: list[Row]
    notices: list[Row]
    logs: list[Row]
    by_id: dict[uuid.UUID, Row]
    by_plan: dict[tuple[str, str, datetime], Row]  # (job, scope, plan time)
    events: dict[uuid.UUID, list[Row]]  # each row's audit history in order, the seed's left out
    log_counts: Counter[str]

    @classmethod
    def read(cls, run: ChaosRun) -> Observed:
        rows = run.q("SELECT * FROM {s}.cron_executions WHERE runner_id IS DISTINCT FROM 'seed'")
        history = run.q("SELECT * FROM {s}.chaos_history ORDER BY seq")
        ledger = run.q("SELECT * FROM {s}.chaos_ledger ORDER BY seq")
        notices = run.q("SELECT * FROM {s}.chaos_notices ORDER BY seq")
        logs = log_events(run.logs)
        events: dict[uuid.UUID, list[Row]] = defaultdict(list)
        for h in history:
            if h["runner_id"] != "seed":
                events[h["id"]].append(h)
        return cls(
            rows=rows,
            history=history,
            ledger=ledger,
            notices=notices,
            logs=logs,
            by_id={r["id"]: r for r in rows},
            by_plan={(r["job_name"], r["scope_id"], r["plan_time"]): r for r in rows},
            events=events,
            log_counts=Counter(str(e.get("event")) for e in logs),
        )

    def logged(self, event: str) -> list[Row]:
        """The replicas' log lines of ``event``."""
        return [e for e in self.logs if e.get("event") == event]

    def changes(self) -> Iterator[tuple[uuid.UUID, Row]]:
        """Every committed change of every row, as (execution id, history entry)."""
        for exec_id, evs in self.events.items():
            for h in evs:
                yield exec_id, h


def is_claim(h: Row) -> bool:
    """A history entry that gave the row a new lease: a first claim, a retry or a steal."""
    return h["new_status"] == "RUNNING" and (
        h["old_status"] is None or h["old_token"] != h["new_token"]
    )


def next_change(evs: list[Row], token: uuid.UUID) -> Row | None:
    """The first committed change of a row (its audit history ``evs``, in order) after the
    claim that gave it lease ``token``: a steal, a close-out or the holder's terminal write."""
    for i, h in enumerate(evs):
        if h["new_token"] == token and h["new_status"] == "RUNNING" and h["old_token"] != token:
            return evs[i + 1] if i + 1 < len(evs) else None
    return None


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def summary(values: list[float], *percentiles: int) -> dict[str, Any]:
    """``n``, the given percentiles (``p50``, ...) and ``max`` of ``values``, rounded."""
    out: dict[str, Any] = {"n": len(values)}
    for q in percentiles:
        out[f"p{q}"] = rounded(percentile(values, q))
    out["max"] = rounded(max(values, default=None))
    return out


def log_events(paths: list[Path]) -> list[Row]:
    """Every JSON line the replicas logged, each with ``_process`` (its log file). A
    ``lease_lost`` event of a run whose outcome the same process also logged as written
    (``run_succeeded`` / ``run_failed``, just before or after) is flagged ``_own_outcome``:
    the lease was not lost, its holder's terminal write was accepted."""
    out = []
    for path in paths:
        if not path.exists():
            continue
        events = []
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    events.append(json.loads(line))
        written = {
            (e.get("execution_id"), e.get("attempt"))
            for e in events
            if e.get("event") in ("run_succeeded", "run_failed")
        }
        for event in events:
            event["_process"] = path.name
            key = (event.get("execution_id"), event.get("attempt"))
            if event.get("event") == "lease_lost" and key in written:
                event["_own_outcome"] = True
        out.extend(events)
    return out
