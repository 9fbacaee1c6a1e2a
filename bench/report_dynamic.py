"""The schedules-as-data part of docs/performance.md (workloads g, h, i): its table, its
goals and its method, from the same results JSON; and the merge of several results files,
so a run of a subset of the workloads can be added to an earlier full run's page.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

Goal = tuple[str, bool | None, str]
Fmt = Callable[..., str]

COLUMNS = (
    "workload",
    "scheduler",
    "schedules",
    "put schedules/s",
    "stmts/tick",
    "DB ms/tick",
    "peak RSS MB",
    "completed %",
    "dup.",
    "lag p50 / p99 (s)",
    "churn ops/s",
    "stale claims",
    "missed",
    "notes",
)

METHOD = """\
## Schedules as data (g, h, i)

* **One dynamic job** (`@scheduler.job(name="bench", dynamic=True)`, `docs/schedules.md`) whose
  schedules are data: a driver process (`bench/peers/dynamic.py`, run with the contender's
  own interpreter) puts, replaces and deletes them through the contender's public API while
  its replicas run: for pgsched `pgsched.Admin(dsn).put_schedules(job, specs)` per batch and
  `delete_schedule` per delete, for the peers their own API (below). The handler is the
  same ledger INSERT as in a-f.
* **(g)** 1,000,000 random 5-field cron expressions (fixed hours, weekdays, days of month,
  minute steps) over 24 IANA zones (whole, half and quarter-hour offsets, with and without
  DST), none of which fires within 70 minutes of the put (their hour fields leave out the
  local hours that span touches). They are put in batches of 10,000 (`put schedules/s` is
  the schedules over the time spent inside the put calls), then after the replicas have
  settled 20 s of idle ticks are measured like (f). A put longer than `--put-cap` (600 s)
  is cut short, and the row says how many were put.
* **(h)** 10,000 schedules `* * * * *` over the same 24 zones, all due at each minute; the
  first minute after the replicas have seen the put and the two after it are measured like
  a-d (completion, duplicates, start lag from the minute).
* **(i)** 10,000 schedules with cadences of 10, 15, 20 or 30 s (epoch-aligned), then 60 s
  of churn at 1,000 operations a second from 4 driver threads, every 0.2 s: each picks
  scopes with no operation in flight and replaces the schedule with another cadence (or
  re-puts a deleted one), all in one batch put, or deletes it (10%, one call each: no API
  deletes several at once). The driver logs every operation with the instants before it
  was sent and after it returned (its commit lies between). An execution is **stale** when
  no version of its schedule that may have been in force at any instant between its claim
  (the contender's own record: pgsched's `cron_executions.created_at`, DBOS's enqueue of
  the workflow, celery beat's send of the task) and its handler's start has its plan: a
  multiple of the version's cadence strictly after the version was put. Doubt counts in the
  contender's favour. **Missed** counts plans that surely fell due during the churn while a
  version was surely in force, and stayed so for 10 s after, and never ran (a plan not yet
  claimed when its schedule is replaced or deleted is rightly never run). `dup.` counts
  ledger rows beyond one per (scope, plan) over the whole trial, as in a-f.
* **DBOS 3.4.0** (`bench/peers/dbos_peer.py`): one DBOS schedule per scope
  (`DBOSClient.apply_schedules` per batch, create or replace, atomically;
  `delete_schedule`), one workflow that records the fire time and the scope from the
  schedule's context. Each replica is a launched DBOS process polling the schedules every
  5 s (`scheduler_polling_interval_sec`); it keeps one thread per active schedule, which
  enqueues the workflow `sched-<name>-<time>` (the id makes the other replicas' enqueues of
  the same fire no-ops) with a jitter of up to 10% of the wait (at most 10 s). It gets
  10,000 schedules in (g), and 1,000 in (h) and (i) (churn 100/s): with 10,000 due every
  minute its 3 x 10,000 threads drove the load average to 1,000 and completed no plan.
* **django-celery-beat 2.9.0** (`bench/peers/celery_peer.py`) with celery 5.7.0 on the
  machine's Redis: one `PeriodicTask` with its own `CrontabSchedule` (expression and zone)
  per scope, put with `bulk_create` (create or replace by name, one transaction per batch,
  then `PeriodicTasks.update_changed()`), deleted with `delete()`. celery beat must run
  once per cluster (a second beat fires everything twice), so it is one beat (its
  `DatabaseScheduler`, checking for changes every second) and one worker (8 threads): two
  processes where the others have three replicas. Its crontab has no seconds, so its churn
  cadences are 1 and 2 minutes. It gets 1,000 schedules in (g) (at 10,000 and 100,000 its
  beat spent the whole window in its first load of the schedules, one SELECT that maps
  each crontab's hour to the server's zone, and never ticked), and 2,000 in (h) and (i)
  (churn 200/s): with 10,000 due every minute its one beat sent 6% of them.
* A peer given fewer schedules says so in the table's *notes*; its churn is scaled to the
  same share of its schedules a second.
"""


def is_dynamic(report: dict[str, Any], r: dict[str, Any]) -> bool:
    return bool(report.get("workloads", {}).get(r["workload"], {}).get("schedules"))


def table(report: dict[str, Any], fmt: Fmt, order: tuple[str, ...], label: Fmt) -> list[str]:
    rows = [r for r in report["results"] if is_dynamic(report, r)]
    if not rows:
        return []
    rows.sort(
        key=lambda r: (
            r["workload"],
            order.index(r["scheduler"]) if r["scheduler"] in order else 99,
        )
    )
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---|---|" + "--:|" * (len(COLUMNS) - 3) + "---|"]
    for r in rows:
        name = label(r["scheduler"])
        name = f"**{name}**" if r["scheduler"] == "pgsched" else name
        lines.append(f"| {r['workload']} | {name} | " + " | ".join(cells(r, fmt)) + " |")
    return lines


def cells(r: dict[str, Any], fmt: Fmt) -> list[str]:
    if r.get("status") != "ok":
        return [f"{r.get('status')}: {r.get('reason', '')}"] + [""] * (len(COLUMNS) - 3)
    lag = "–"
    if r.get("due"):
        lag = f"{fmt(r.get('lag_p50_s'))} / {fmt(r.get('lag_p99_s'))}"
    elif r.get("churn_lag_p99_s") is not None:
        lag = f"{fmt(r.get('churn_lag_p50_s'))} / {fmt(r.get('churn_lag_p99_s'))}"
    missed = "–"
    if "churn_missed" in r:
        missed = f"{fmt(r['churn_missed'])} of {fmt(r['churn_due'])}"
    return [
        fmt(r.get("put_schedules") or r.get("schedules", r.get("scopes"))),
        fmt(r.get("put_per_s"), 0),
        fmt(r.get("statements_per_tick")),
        fmt(r.get("db_ms_per_tick")),
        " ".join(fmt(m, 0) for m in r.get("peak_rss_mb", [])),
        fmt(r.get("completion_pct"), 1) if r.get("due") else "–",
        fmt(r.get("duplicates")),
        lag,
        fmt(r.get("churn_ops_per_s"), 0),
        fmt(r.get("stale_claims")),
        missed,
        r.get("size_note", ""),
    ]


def find(report: dict[str, Any], wl: str) -> dict[str, Any] | None:
    for r in report["results"]:
        if r["workload"] == wl and r["scheduler"] == "pgsched" and r.get("status") == "ok":
            found: dict[str, Any] = r
            return found
    return None


def goals(report: dict[str, Any], fmt: Fmt) -> list[Goal]:
    """pgsched's goals on schedules as data (issue 12), each with its evidence."""
    g, h, i = (find(report, k) for k in "ghi")
    target = report.get("workloads", {}).get("i", {}).get("churn_per_s", 1000)
    return [
        *(goals_g(g, fmt) if g else []),
        *([goal_h(h, fmt)] if h else []),
        *(goals_i(i, target, fmt) if i else []),
    ]


def goals_g(g: dict[str, Any], fmt: Fmt) -> list[Goal]:
    size = f"{fmt(g.get('put_schedules'))} of {fmt(g.get('schedules'))} schedules"
    return [
        (
            "(g) bulk put through Admin.put_schedules >= 50,000 schedules/s",
            (g.get("put_per_s") or 0) >= 50_000,
            f"{fmt(g.get('put_per_s'), 0)} schedules/s ({size}, batches of "
            f"{fmt(g.get('put_batch'))}, slowest batch {fmt(g.get('put_batch_s_max'))} s)",
        ),
        (
            "(g) idle tick with 1,000,000 schedules: O(jobs) statements, < 5 ms DB time",
            g.get("statements_per_tick") is not None
            and g["statements_per_tick"] <= 3
            and g["db_ms_per_tick"] < 5,
            f"{fmt(g.get('statements_per_tick'))} statements and "
            f"{fmt(g.get('db_ms_per_tick'))} ms of database time per tick per replica "
            f"(1 job, {size}), source {g.get('statements_source')}",
        ),
        (
            "(g) a replica's RSS < 200 MB with 1,000,000 schedules",
            max(g["peak_rss_mb"], default=0) < 200,
            f"peak RSS {' '.join(fmt(m, 0) for m in g['peak_rss_mb'])} MB ({size})",
        ),
    ]


def goal_h(h: dict[str, Any], fmt: Fmt) -> Goal:
    return (
        "(h) 10,000 schedules due at the same minute: 100% completed, p99 start lag < 1 s, "
        "zero duplicates",
        h["completion_pct"] == 100.0 and (h["lag_p99_s"] or 0) < 1.0 and h["duplicates"] == 0,
        f"{fmt(h['completion_pct'], 1)}% of {fmt(h['due'])}, p99 {fmt(h['lag_p99_s'])} s, "
        f"{fmt(h['duplicates'])} duplicates",
    )


def goals_i(i: dict[str, Any], target: int, fmt: Fmt) -> list[Goal]:
    return [
        (
            f"(i) the churn reaches {fmt(target)} replacements and deletes/s",
            i["churn_ops_per_s"] >= 0.95 * target,
            f"{fmt(i['churn_ops_per_s'], 0)} operations/s from one driver process",
        ),
        (
            "(i) under churn: zero double runs, zero plans of a replaced or deleted spec "
            "claimed after it committed",
            i["duplicates"] == 0 and i["stale_claims"] == 0,
            f"{fmt(i['churn_ops'])} operations at {fmt(i['churn_ops_per_s'], 0)}/s; "
            f"{fmt(i['duplicates'])} duplicates, {fmt(i['stale_claims'])} stale claims, "
            f"{fmt(i['churn_missed'])} of {fmt(i['churn_due'])} plans missed",
        ),
    ]


def merge(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report from several: a later file's result replaces an earlier one's for the
    same (workload, scheduler); the runs they came from are listed in ``runs``."""
    merged: dict[str, Any] = {**reports[0], "results": [], "workloads": {}, "runs": []}
    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    for rep in reports:
        merged["workloads"].update(rep.get("workloads", {}))
        for run in rep.get("runs") or [
            {"started": rep.get("started"), "command": rep.get("command")}
        ]:
            if run not in merged["runs"]:
                merged["runs"].append(run)
        for r in rep["results"]:
            by_key[(r["workload"], r["scheduler"])] = r
    merged["workloads"] = dict(sorted(merged["workloads"].items()))
    merged["results"] = sorted(by_key.values(), key=lambda r: r["workload"])
    merged["merged"] = datetime.now(UTC).isoformat()
    # The page's start and end load are the latest run's (its results are the page's news).
    merged["loadavg_start"] = reports[-1].get("loadavg_start")
    merged["loadavg_end"] = reports[-1].get("loadavg_end")
    return merged
