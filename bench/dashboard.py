"""How long the dashboard's pages take to render at scale: ``python -m bench.dashboard DSN``.

Seeds a schema of its own (dropped afterwards) with a dynamic job of 1,000,000 schedules (two
runs each in the ledger) and a code-defined job of 100,000 scopes x 30 plans, as replicas
would have left them, then renders each page through the dashboard itself (the operations
core over an AsyncAdmin's pool, the HTML included; no HTTP) and prints the median and
slowest of several renders. Results go to bench/results/dashboard.json.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

import pgsched
from pgsched._http.auth import Tokens
from pgsched._http.web import Dashboard, WebRequest

SCHEMA = "bench_dashboard"
SCHEDULES = 1_000_000
FANOUT_SCOPES = 100_000
FANOUT_PLANS = 30
RENDERS = 7
OUT = Path(__file__).parent / "results" / "dashboard.json"

SEED = [
    "INSERT INTO {s}.job_state (job_name, schedule) VALUES ('reminder', 'dynamic'),"
    " ('fanout', 'every 1m')",
    # 1,000,000 schedules over 24 zones, each next plan within the coming day.
    "INSERT INTO {s}.schedules (job_name, scope_kind, scope_id, cron, timezone, payload,"
    " paused, next_plan_time, created_at, updated_at)"
    " SELECT 'reminder', 'user', 'u' || lpad(i::text, 7, '0'), (i %% 60) || ' 9 * * *',"
    "   'Etc/GMT' || CASE WHEN i %% 24 < 12 THEN '+' ELSE '-' END || (i %% 12),"
    "   jsonb_build_object('text', 'hello ' || i), i %% 50 = 0,"
    "   date_trunc('minute', now()) + (i %% 1440) * interval '1 minute', now(), now()"
    " FROM generate_series(1, %(schedules)s) AS i",
    # Two past runs of each schedule.
    "INSERT INTO {s}.cron_executions (job_name, scope_kind, scope_id, plan_time, trigger,"
    " status, attempt, max_attempts, runner_id, started_at, finished_at, duration_ms)"
    " SELECT 'reminder', 'user', 'u' || lpad(i::text, 7, '0'),"
    "   date_trunc('minute', now()) - d * interval '1 day' - (i %% 1440) * interval '1 minute',"
    "   'schedule', 'SUCCESS', 1, 1, 'r1',"
    "   date_trunc('minute', now()) - d * interval '1 day' - (i %% 1440) * interval '1 minute'"
    "     + interval '150 ms', date_trunc('minute', now()) - d * interval '1 day'"
    "     - (i %% 1440) * interval '1 minute' + interval '400 ms', 250"
    " FROM generate_series(1, %(schedules)s) AS i, generate_series(1, 2) AS d",
    # A 100,000-scope fan-out, 30 plans, one run in 97 failed.
    "INSERT INTO {s}.cron_executions (job_name, scope_kind, scope_id, plan_time, trigger,"
    " status, attempt, max_attempts, runner_id, started_at, finished_at, duration_ms,"
    " error_code, error_msg)"
    " SELECT 'fanout', 'tenant', 't' || lpad(i::text, 6, '0'), p.t, 'schedule',"
    "   CASE WHEN (i + k) %% 97 = 0 THEN 'FAILED' ELSE 'SUCCESS' END, 1, 1, 'r1',"
    "   p.t + (i %% 600) * interval '100 ms', p.t + (i %% 600) * interval '100 ms'"
    "     + interval '80 ms', 80 + i %% 40,"
    "   CASE WHEN (i + k) %% 97 = 0 THEN 'handler_error' END,"
    "   CASE WHEN (i + k) %% 97 = 0 THEN 'RuntimeError: quota' END"
    " FROM generate_series(1, %(plans)s) AS k,"
    "   LATERAL (SELECT date_trunc('minute', now()) - k * interval '1 minute' AS t) AS p,"
    "   generate_series(1, %(scopes)s) AS i",
    "ANALYZE {s}.schedules",
    "ANALYZE {s}.cron_executions",
]


def seed(dsn: str) -> dict[str, float]:
    took: dict[str, float] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
        started = time.monotonic()
        pgsched.Admin(dsn, SCHEMA).migrate()
        params = {"schedules": SCHEDULES, "scopes": FANOUT_SCOPES, "plans": FANOUT_PLANS}
        for i, text in enumerate(SEED):
            step = time.monotonic()
            query = sql.SQL(text).format(s=sql.Identifier(SCHEMA))
            conn.execute(query, params if "%(" in text else None)
            took[f"seed step {i}"] = round(time.monotonic() - step, 1)
        took["seed total"] = round(time.monotonic() - started, 1)
    return took


def _seeded(dsn: str) -> bool:
    with psycopg.connect(dsn) as conn:
        found = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (SCHEMA,)).fetchone()
    return found is not None


PAGES = {
    "overview": ("/", {}),
    "job (100,000 scopes, first page)": ("/job", {"name": "fanout"}),
    "job (100,000 scopes, a later page)": ("/job", {"name": "fanout", "after": "tenant:t050000"}),
    "job (100,000 scopes, searched)": ("/job", {"name": "fanout", "q": "tenant:t09999"}),
    "job (1,000,000 schedules)": ("/job", {"name": "reminder"}),
    "schedules (1,000,000, first page)": ("/schedules", {"name": "reminder"}),
    "schedules (1,000,000, searched)": ("/schedules", {"name": "reminder", "q": "user:u09999"}),
    "schedules (1,000,000, a later page)": (
        "/schedules",
        {"name": "reminder", "after": "user:u0700000"},
    ),
}


async def measure(dsn: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    async with pgsched.AsyncAdmin(dsn, SCHEMA) as admin:
        board = Dashboard(admin, tokens=Tokens(None, None))
        for name, (path, query) in PAGES.items():
            req = WebRequest("GET", path, query, {}, {}, {}, "/")
            times = []
            for _ in range(RENDERS + 1):  # the first warms the caches and the pool
                started = time.perf_counter()
                answer = await board.handle(req)
                times.append((time.perf_counter() - started) * 1000)
                assert answer.status == 200, (name, answer.status, answer.body[-500:])
            timed = times[1:]
            out[name] = {
                "median_ms": round(statistics.median(timed), 1),
                "max_ms": round(max(timed), 1),
                "html_kb": round(len(answer.body) / 1024, 1),
            }
            print(
                f"{name:40} median {out[name]['median_ms']:8.1f} ms  max "
                f"{out[name]['max_ms']:8.1f} ms  {out[name]['html_kb']} KiB",
                flush=True,
            )
    return out


def main(argv: list[str]) -> int:
    """``DSN [--keep]``: ``--keep`` leaves the seeded schema (and reuses it when present)."""
    keep = "--keep" in argv
    argv = [a for a in argv if a != "--keep"]
    dsn = argv[0] if argv else "postgresql://postgres@127.0.0.1:5432/postgres"
    try:
        seeded = {"seed total": 0.0} if keep and _seeded(dsn) else seed(dsn)
        print(json.dumps(seeded), flush=True)
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(
                sql.SQL("SELECT count(*) FROM {}.cron_executions").format(sql.Identifier(SCHEMA))
            ).fetchone()
            version = conn.execute("SHOW server_version").fetchone()
        pages = asyncio.run(measure(dsn))
    finally:
        if not keep:
            with psycopg.connect(dsn, autocommit=True) as conn:
                drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA))
                conn.execute(drop)
    report: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "schedules": SCHEDULES,
        "ledger_rows": rows[0] if rows else None,
        "postgres": version[0] if version else None,
        "seed_s": seeded,
        "pages": pages,
    }
    OUT.write_text(json.dumps(report, indent=1))
    print(f"written to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
