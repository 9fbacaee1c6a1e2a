"""``python -m bench.history``: workload (j), whether costs stay flat as the ledger's history
grows.

One replica (``pgsched run``) runs a fan-out of ``--scopes`` every ``--every`` seconds on a
private PostgreSQL (or ``--dsn``: a server of the caller's, in a database of the bench's own).
Three phases, each measured over ``--window`` seconds of that live load, each window starting
right after a ``CHECKPOINT``:

- **empty**: the ledger holds only the live runs.
- **full**: ``--rows`` finished rows of the same job and scopes are then put in the ``--days``
  before (by SQL, shaped as pgsched writes them, a partition a day as a backfill would make
  them), then ``VACUUM ANALYZE``; the same window again.
- **retention**: ``pgsched prune`` drops the oldest day of that history while the replica
  runs, in the middle of a third window: its seconds and WAL bytes, and that window's start
  lag against the full phase's.

Each phase reports, per statement of the replica (``pg_stat_statements``, when loaded), its
calls and mean database milliseconds; the start lag (``started_at - plan_time``) of the
window's runs; and the operator's reads, each timed ``--reads`` times by the bench (median
ms): ``status``, ``runs`` (the job's newest 50, one scope's, the failures), the dashboard's
overview, the job's page and an execution's page. ``ratios`` divide the full phase's figures
by the empty one's. Results print as JSON and go to ``bench/results/history-<time>.json``;
they are read against each other in the same run, never against another machine's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

import pgsched
from bench.live import database, live_options, replica, write_result
from bench.measure import Statements
from bench.pg import one, wal
from bench.shared import RESULTS
from pgsched._facades.http.auth import Tokens
from pgsched._facades.http.web import Dashboard, WebRequest

SCHEMA = "pgsched"
DATABASE = "history"
JOB = "fan"

APP = textwrap.dedent(
    """
    import os
    import pgsched

    scopes = int(os.environ["HISTORY_SCOPES"])
    scheduler = pgsched.Scheduler(runner_id="history", tick_interval="1s",
                                  max_concurrency=scopes)

    @scheduler.job(every=int(os.environ["HISTORY_EVERY"]), run_timeout="5m",
                   scopes=[pgsched.Scope("tenant", str(i)) for i in range(scopes)])
    async def fan(run: pgsched.Run) -> None:
        return None
    """
)

# History shaped as pgsched's finished rows of the job: one per (scope, plan), the plans of a
# day spread evenly over it; one run in 97 failed, its attempt kept in cron_attempts as
# pgsched keeps it. Filled a day (a partition) per statement.
FILL = """
WITH filled AS (
INSERT INTO {table} (job_name, scope_kind, scope_id, plan_time, trigger, status, attempt,
    max_attempts, runner_id, lease_token, fencing_token, heartbeat_at, stale_after, started_at,
    finished_at, duration_ms, result, error_code, error_msg, created_at, updated_at)
SELECT %(job)s, 'tenant', (i %% %(scopes)s)::text, p.t, 'schedule',
       CASE WHEN i %% 97 = 0 THEN 'FAILED' ELSE 'SUCCESS' END, 1, 1, 'filled',
       gen_random_uuid(), i, p.t, p.t + interval '1 minute', p.t, p.t + interval '80 ms', 80,
       '{{}}', CASE WHEN i %% 97 = 0 THEN 'handler_error' END,
       CASE WHEN i %% 97 = 0 THEN 'RuntimeError: quota' END, p.t, p.t
FROM generate_series(0, %(rows)s - 1) AS i,
     LATERAL (SELECT %(day)s::timestamptz
                     + make_interval(secs => (i / %(scopes)s) * %(step)s) AS t) AS p
RETURNING id, fencing_token, attempt, runner_id, started_at, finished_at, error_code,
          error_msg, plan_time, status
)
INSERT INTO {attempts} (execution_id, fencing_token, attempt, runner_id, started_at,
    finished_at, error_code, error_msg, traceback, plan_time)
SELECT id, fencing_token, attempt, runner_id, started_at, finished_at, error_code, error_msg,
       'Traceback (most recent call last):\nRuntimeError: quota', plan_time
FROM filled WHERE status = 'FAILED'
"""


def _options(argv: list[str] | None) -> argparse.Namespace:
    parser = live_options(
        "python -m bench.history", __doc__, every=10, warmup=30.0, window=60.0, rows=50_000_000
    )
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--reads", type=int, default=7)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def _table() -> sql.Composed:
    return sql.SQL("{}.cron_executions").format(sql.Identifier(SCHEMA))


def _wait_for_runs(conn: psycopg.Connection[Any], deadline_s: float) -> None:
    """Until the replica has finished some runs (it migrated and claimed), or fail."""
    query = sql.SQL("SELECT count(*) FROM {} WHERE finished_at IS NOT NULL").format(_table())
    deadline = time.monotonic() + deadline_s
    while one(conn, query)[0] == 0:
        if time.monotonic() > deadline:
            raise SystemExit(f"no run finished within {deadline_s:.0f} s")
        time.sleep(0.5)


# -- what a phase measures --------------------------------------------------------------------


def _lag(conn: psycopg.Connection[Any], since: datetime, until: datetime) -> dict[str, Any]:
    """Start lag of the live runs planned in [since, until)."""
    query = sql.SQL(
        "SELECT extract(epoch FROM started_at - plan_time) FROM {}"
        " WHERE job_name = %s AND plan_time >= %s AND plan_time < %s AND started_at IS NOT NULL"
    ).format(_table())
    lags = sorted(float(r[0]) for r in conn.execute(query, (JOB, since, until)).fetchall())
    if not lags:
        return {"runs": 0}
    return {
        "runs": len(lags),
        "lag_p50_s": round(lags[len(lags) // 2], 3),
        "lag_p99_s": round(lags[min(len(lags) - 1, int(len(lags) * 0.99))], 3),
    }


async def _timed(call: Callable[[], Awaitable[Any]], reads: int) -> float:
    """The median of ``reads`` timings of ``call`` (after one that warms the pool), in ms."""
    await call()
    times = []
    for _ in range(reads):
        started = time.perf_counter()
        await call()
        times.append((time.perf_counter() - started) * 1000)
    return round(statistics.median(times), 2)


async def _reads(dsn: str, reads: int) -> dict[str, float]:
    """The operator's reads against the ledger as it is now, median ms each."""
    async with pgsched.AsyncAdmin(dsn, SCHEMA) as admin:
        board = Dashboard(admin, tokens=Tokens(None, None))
        newest = (await admin.runs(JOB, limit=1))[0].id

        async def page(path: str, query: dict[str, str]) -> None:
            answer = await board.handle(WebRequest("GET", path, query, {}, {}, {}, "/"))
            assert answer.status == 200, (path, answer.status)

        scope = pgsched.Scope("tenant", "7")
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            "status": admin.status,
            "runs (the job's newest 50)": lambda: admin.runs(JOB, limit=50),
            "runs (one scope's newest 50)": lambda: admin.runs(JOB, limit=50, scope=scope),
            "runs (the newest 50 failures)": lambda: admin.runs(status="FAILED", limit=50),
            "dashboard overview": lambda: page("/", {}),
            "dashboard job page": lambda: page("/job", {"name": JOB}),
            "dashboard execution page": lambda: page("/run", {"id": str(newest)}),
        }
        return {name: await _timed(call, reads) for name, call in calls.items()}


def phase(dsn: str, conn: psycopg.Connection[Any], args: argparse.Namespace) -> dict[str, Any]:
    """One window of the live load: its statements and start lag, then the reads."""
    loaded = "SELECT count(*) FROM pg_extension WHERE extname = 'pg_stat_statements'"
    statements = Statements(conn, DATABASE, enabled=bool(one(conn, loaded)[0]))
    # Each window starts from a checkpoint: after the fill, writing back its gigabytes of
    # dirty pages would otherwise fall in the full phase's window and slow it.
    conn.execute("CHECKPOINT")
    statements.reset()
    since = one(conn, "SELECT clock_timestamp()")[0]
    time.sleep(args.window)
    until = one(conn, "SELECT clock_timestamp()")[0] - timedelta(seconds=args.every)
    return {
        "statements": statements.by_name(),
        "start": _lag(conn, since, until),
        "reads_ms": asyncio.run(_reads(dsn, args.reads)),
        "ledger_rows": one(conn, sql.SQL("SELECT count(*) FROM {}").format(_table()))[0],
    }


# -- history and retention -----------------------------------------------------------------


def fill(dsn: str, conn: psycopg.Connection[Any], args: argparse.Namespace) -> dict[str, Any]:
    """``--rows`` finished rows over the ``--days`` days before today's, then VACUUM ANALYZE."""
    today = one(conn, "SELECT date_bin('1 day', now(), '2000-01-01')")[0]
    first = today - timedelta(days=args.days)
    days = [first + timedelta(days=d) for d in range(args.days)]
    ensure = sql.SQL("SELECT {}(%s)").format(sql.Identifier(SCHEMA, "cron_ensure_partitions"))
    for start in range(0, len(days), 32):  # the function makes at most 32 a call
        conn.execute(ensure, (days[start : start + 32],))
    plans_per_day = max(1, args.rows // args.days // args.scopes)
    per_day = plans_per_day * args.scopes  # whole plans, each inside its day
    started = time.monotonic()

    def fill_day(day: datetime) -> None:
        params = {"job": JOB, "scopes": args.scopes, "rows": per_day, "day": day}
        params["step"] = 86400 / plans_per_day
        with psycopg.connect(dsn, autocommit=True) as mine:
            attempts = sql.Identifier(SCHEMA, "cron_attempts")
            mine.execute(sql.SQL(FILL).format(table=_table(), attempts=attempts), params)
        print(f"history: {day:%Y-%m-%d} filled", file=sys.stderr, flush=True)

    with ThreadPoolExecutor(2) as pool:  # two days at once: the machine's two cores
        list(pool.map(fill_day, days))
    filled = time.monotonic() - started
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(_table()))
    return {
        "rows": per_day * args.days,
        "days": args.days,
        "first_day": first.isoformat(),
        "fill_s": round(filled, 1),
        "vacuum_analyze_s": round(time.monotonic() - started - filled, 1),
    }


def retention(
    dsn: str, conn: psycopg.Connection[Any], args: argparse.Namespace, first_day: datetime
) -> dict[str, Any]:
    """A third window, ``pgsched prune`` dropping the oldest day in its middle."""
    now = one(conn, "SELECT now()")[0]
    # The cutoff a minute past the oldest day's end: that day's partition and no other.
    older_than = int((now - (first_day + timedelta(days=1, minutes=1))).total_seconds())
    done: dict[str, Any] = {}

    def prune() -> None:
        time.sleep(args.window / 2)
        with psycopg.connect(dsn, autocommit=True) as mine:
            before, started = wal(mine), time.monotonic()
            out = subprocess.run(
                [sys.executable, "-m", "pgsched", "prune", "--older-than", f"{older_than}s"],
                env=dict(os.environ, PGSCHED_DSN=dsn, PGSCHED_SCHEMA=SCHEMA),
                capture_output=True,
                text=True,
                check=True,
            )
            done["seconds"] = round(time.monotonic() - started, 2)
            done["wal_bytes"] = wal(mine)["bytes"] - before["bytes"]
            done["output"] = out.stdout.strip()[-200:]

    pruner = threading.Thread(target=prune)
    pruner.start()
    window = phase(dsn, conn, args)
    pruner.join()
    return {"prune": done, "window": window}


def ratios(empty: dict[str, Any], full: dict[str, Any]) -> dict[str, Any]:
    """Full over empty: each read, each statement's mean, the start lag's p99."""
    out: dict[str, Any] = {
        name: round(ms / empty["reads_ms"][name], 2) if empty["reads_ms"][name] else None
        for name, ms in full["reads_ms"].items()
    }
    for name, stats in (full["statements"] or {}).items():
        base = (empty["statements"] or {}).get(name)
        if base and base["mean_ms"]:
            out[f"statement {name}"] = round(stats["mean_ms"] / base["mean_ms"], 2)
    p99s = (empty["start"].get("lag_p99_s"), full["start"].get("lag_p99_s"))
    if p99s[0] and p99s[1] is not None:
        out["start lag p99"] = round(p99s[1] / p99s[0], 2)
    return out


def run(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    pgsched.Admin(dsn, SCHEMA).migrate()
    result: dict[str, Any] = {"when": datetime.now(UTC).isoformat(), "args": vars(args)}
    env = {"HISTORY_SCOPES": str(args.scopes), "HISTORY_EVERY": str(args.every)}
    with psycopg.connect(dsn, autocommit=True) as conn, replica(dsn, APP, env):
        _wait_for_runs(conn, 120)
        time.sleep(args.warmup)
        result["empty"] = phase(dsn, conn, args)
        result["history"] = fill(dsn, conn, args)
        result["full"] = phase(dsn, conn, args)
        first_day = datetime.fromisoformat(result["history"]["first_day"])
        result["retention"] = retention(dsn, conn, args, first_day)
    result["ratios"] = ratios(result["empty"], result["full"])
    lags = (result["full"]["start"], result["retention"]["window"]["start"])
    if lags[0].get("lag_p99_s") and lags[1].get("lag_p99_s") is not None:
        result["ratios"]["start lag p99 with retention"] = round(
            lags[1]["lag_p99_s"] / lags[0]["lag_p99_s"], 2
        )
    return result


def main(argv: list[str] | None = None) -> int:
    args = _options(argv)
    with database(args.dsn, DATABASE) as (server, dsn):
        if server.has_pgss:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        result = run(dsn, args)
    write_result(args.results_dir, "history", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
