"""The checks of the churn workload (i): every execution against the schedule in force when
it was claimed, from the driver's log of operations and the ledger.

The driver logs, for every replacement, delete and re-put, the wall-clock instants before it
was sent (``t0``) and after it returned (``t1``); its commit lies between. A schedule's
version ``k`` may be in force from its put's ``t0`` until the next operation's ``t1``, and is
surely in force from its put's ``t1`` until the next operation's ``t0``. An execution was
decided between its claim (the contender's own record: ``claimed_at``) and its handler's
start (the ledger's ``started_at``). It is **stale** when no version that may have been in
force at any instant of that interval has its plan: a multiple of the version's cadence,
strictly after the version was put (docs/schedules.md: the new spec's first plan is its first
occurrence strictly after the replacement, and no plan of the old spec, nor of a deleted
schedule, is claimed afterwards). Doubt counts in the contender's favour. A plan that surely
fell due during the churn while a version was surely in force, and stayed so for
:data:`GRACE_S` after, and never ran is **missed**.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

from bench.peers.common import LEDGER_TABLE

GRACE_S = 10.0


@dataclass(frozen=True)
class Version:
    t0: float  # before the operation was sent
    t1: float  # after it returned
    every_s: int | None  # None: deleted


Versions = dict[str, list[Version]]


def versions(run_dir: Path) -> tuple[Versions, dict[str, Any]]:
    """Each scope's versions in order: the initial put, then the driver's operations."""
    put = json.loads((run_dir / "put-churn.json").read_text())
    initial = json.loads((run_dir / "initial.json").read_text())
    out: Versions = {
        scope: [Version(put["started"], put["finished"], every)] for scope, every in initial.items()
    }
    entries = []
    with open(run_dir / "churn.jsonl", encoding="utf-8") as fh:
        entries = [json.loads(line) for line in fh if line.strip()]
    for e in sorted(entries, key=lambda e: e["t0"]):
        out[e["scope"]].append(Version(e["t0"], e["t1"], e["every_s"]))
    return out, json.loads((run_dir / "churn.json").read_text())


def candidates(vs: list[Version], lo: float, hi: float) -> list[Version]:
    """The versions that may have been in force at some instant of ``[lo, hi]``."""
    out = []
    for k, v in enumerate(vs):
        ends = vs[k + 1].t1 if k + 1 < len(vs) else math.inf
        if v.t0 <= hi and ends > lo:
            out.append(v)
    return out


def allowed(v: Version, plan: float) -> bool:
    return v.every_s is not None and round(plan) % v.every_s == 0 and plan > v.t0


def expected(vs: list[Version], start: float, end: float) -> set[float]:
    """Plans that surely fell due in ``[start, end]`` while a version was surely in force,
    and that it stayed in force for :data:`GRACE_S` after (a plan not yet claimed when its
    schedule is replaced or deleted is rightly never run)."""
    plans: set[float] = set()
    for k, v in enumerate(vs):
        if v.every_s is None:
            continue
        until = min(end, vs[k + 1].t0 - GRACE_S if k + 1 < len(vs) else math.inf)
        p = (math.floor(max(v.t1, start) / v.every_s) + 1) * v.every_s
        while p < until:
            plans.add(float(p))
            p += v.every_s
    return plans


def executions(dsn: str, claims_sql: str) -> list[tuple[str, float, float, float]]:
    """(scope, plan, claimed, started) of every ledger row, in epoch seconds."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            f"SELECT l.scope, l.plan_time, coalesce(c.claimed_at, l.started_at), l.started_at "
            f"FROM {LEDGER_TABLE} l LEFT JOIN ({claims_sql}) AS c(scope, plan_time, claimed_at) "
            f"ON c.scope = l.scope AND c.plan_time = l.plan_time"
        ).fetchall()
    return [(s, p.timestamp(), c.timestamp(), st.timestamp()) for s, p, c, st in rows]


def _ts(t: float) -> str:
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="milliseconds")


def churn_stats(dsn: str, claims_sql: str, run_dir: Path) -> dict[str, Any]:
    """Stale and missed plans and the start lag during the churn (see the module's doc)."""
    vs, churn = versions(run_dir)
    rows = executions(dsn, claims_sql)
    start, end = churn["started"], churn["finished"]
    stale, lags, ran = [], [], defaultdict(set)
    for scope, plan, claimed, started in rows:
        ran[scope].add(plan)
        if start <= plan <= end:
            lags.append(started - plan)
        history = vs.get(scope, [])
        if not any(allowed(v, plan) for v in candidates(history, min(claimed, started), started)):
            stale.append((scope, plan, claimed, started))
    due = {(s, p) for s, h in vs.items() for p in expected(h, start, end)}
    missed = [(s, p) for s, p in due if p not in ran[s]]
    lags.sort()
    return {
        "churn_ops": churn["ops"],
        "churn_puts": churn["puts"],
        "churn_deletes": churn["deletes"],
        "churn_ops_per_s": churn["ops_per_s"],
        "churn_executions": len(lags),
        "churn_due": len(due),
        "churn_missed": len(missed),
        "missed_examples": [
            {"scope": s, "plan": _ts(p), "versions": [v.__dict__ for v in vs[s]][-4:]}
            for s, p in sorted(missed, key=lambda m: m[1])[:5]
        ],
        "stale_claims": len(stale),
        "stale_examples": [
            {"scope": s, "plan": _ts(p), "claimed": _ts(c), "started": _ts(st)}
            for s, p, c, st in sorted(stale, key=lambda r: r[2])[:5]
        ],
        "churn_lag_p50_s": _pct(lags, 0.5),
        "churn_lag_p99_s": _pct(lags, 0.99),
    }


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)
