"""How long ``explain`` takes at scale: ``python -m bench.explain [DSN] [--keep]``.

Seeds a schema of its own (dropped afterwards unless ``--keep``) with an hourly job of 10,000
scopes as replicas would have left it after a month: a cursor per scope (first seen 30 days
ago), the ledger rows of every plan of 1,000 scopes over the 30 days and of all 10,000 over the
last two days, and the skipped spans (a pause of three plans a week ago for every scope,
daily superseded plans for one scope in a hundred, a late plan every few days for some).
Then answers ``explain`` through the operations core (an AsyncAdmin's pool, as the command
line and the API do; no process start) and prints the median and slowest of several answers.
Results go to bench/results/explain.json.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

import pgsched

SCHEMA = "bench_explain"
SCOPES = 10_000
HISTORY_SCOPES = 1_000  # scopes with the whole month in the ledger
DAYS = 30
RECENT_DAYS = 2  # every scope has these in the ledger
RUNS = 9
OUT = Path(__file__).parent / "results" / "explain.json"

# {s}: the schema; plan k (1..720) is k hours before the current hour. The pause: plans
# 168..170 (a week ago), skipped for every scope; superseded: plans k with k % 24 = i % 24
# and k % 7 = 0 for scopes i % 100 = 0 (two plans each: k and k + 1); late: k % 97 = 0 for
# scopes i % 10 = 1. No row exists for a skipped plan.
_SKIPPED = (
    "(k BETWEEN 168 AND 170"
    " OR (i %% 100 = 0 AND k %% 7 = 0 AND k %% 24 = i %% 24)"
    " OR (i %% 100 = 0 AND (k - 1) %% 7 = 0 AND (k - 1) %% 24 = i %% 24)"
    " OR (i %% 10 = 1 AND k %% 97 = 0))"
)
SEED = [
    "INSERT INTO {s}.job_state (job_name, schedule, scopes, seen_at, seen_by)"
    " VALUES ('fanout', 'every 1h', 'callable', now(), 'r1')",
    "INSERT INTO {s}.cron_cursors (job_name, scope_kind, scope_id, next_plan_time, due_at,"
    " spec, first_seen_at, last_plan_time, updated_at)"
    " SELECT 'fanout', 'tenant', 't' || lpad(i::text, 5, '0'),"
    "   date_trunc('hour', now()) + interval '1 hour',"
    "   date_trunc('hour', now()) + interval '1 hour',"
    "   'every 1h', now() - interval '%(days)s days', date_trunc('hour', now()), now()"
    " FROM generate_series(1, %(scopes)s) AS i",
    "INSERT INTO {s}.cron_executions (job_name, scope_kind, scope_id, plan_time, trigger,"
    " status, attempt, max_attempts, runner_id, started_at, finished_at, duration_ms,"
    " error_code, error_msg)"
    " SELECT 'fanout', 'tenant', 't' || lpad(i::text, 5, '0'), p.t, 'schedule',"
    "   CASE WHEN (i + k) %% 97 = 0 THEN 'FAILED' ELSE 'SUCCESS' END, 1, 1, 'r' || (i %% 3),"
    "   p.t + interval '80 ms', p.t + interval '180 ms', 100,"
    "   CASE WHEN (i + k) %% 97 = 0 THEN 'handler_error' END,"
    "   CASE WHEN (i + k) %% 97 = 0 THEN 'RuntimeError: quota' END"
    " FROM generate_series(0, %(days)s * 24 - 1) AS k,"
    "   LATERAL (SELECT date_trunc('hour', now()) - k * interval '1 hour' AS t) AS p,"
    "   generate_series(1, %(scopes)s) AS i"
    " WHERE (i <= %(history_scopes)s OR k < %(recent)s * 24) AND NOT " + _SKIPPED,
    # The spans the claims would have recorded for the skipped plans above (only where the
    # ledger has the scope's history: the pause for every scope).
    "INSERT INTO {s}.cron_skips (job_name, scope_kind, scope_id, reason, first_plan,"
    " last_plan, plans)"
    " SELECT 'fanout', 'tenant', 't' || lpad(i::text, 5, '0'), 'paused',"
    "   date_trunc('hour', now()) - interval '170 hours',"
    "   date_trunc('hour', now()) - interval '168 hours', 3"
    " FROM generate_series(1, %(scopes)s) AS i",
    "INSERT INTO {s}.cron_skips (job_name, scope_kind, scope_id, reason, first_plan,"
    " last_plan, plans)"
    " SELECT 'fanout', 'tenant', 't' || lpad(i::text, 5, '0'), 'superseded',"
    "   date_trunc('hour', now()) - (k + 1) * interval '1 hour',"
    "   date_trunc('hour', now()) - k * interval '1 hour', 2"
    " FROM generate_series(1, %(scopes)s) AS i, generate_series(0, %(days)s * 24 - 2) AS k"
    " WHERE i %% 100 = 0 AND k %% 7 = 0 AND k %% 24 = i %% 24 AND k NOT BETWEEN 167 AND 170",
    "INSERT INTO {s}.cron_skips (job_name, scope_kind, scope_id, reason, first_plan,"
    " last_plan, plans)"
    " SELECT 'fanout', 'tenant', 't' || lpad(i::text, 5, '0'), 'max_lateness',"
    "   date_trunc('hour', now()) - k * interval '1 hour',"
    "   date_trunc('hour', now()) - k * interval '1 hour', 1"
    " FROM generate_series(1, %(scopes)s) AS i, generate_series(0, %(days)s * 24 - 1) AS k"
    " WHERE i %% 10 = 1 AND k %% 97 = 0 AND NOT (i %% 100 = 0)"
    "   AND k NOT BETWEEN 168 AND 170",
    "ANALYZE {s}.cron_executions",
    "ANALYZE {s}.cron_skips",
    "ANALYZE {s}.cron_cursors",
]


def seed(dsn: str) -> dict[str, float]:
    took: dict[str, float] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA)))
        started = time.monotonic()
        admin = pgsched.Admin(dsn, SCHEMA)
        admin.migrate()
        admin.close()
        # Partitions for the month back (the replicas made each day's as it came).
        conn.execute(
            sql.SQL(
                "SELECT {s}.cron_ensure_partitions(ARRAY(SELECT generate_series("
                " now() - interval '32 days', now(), interval '1 day')))"
            ).format(s=sql.Identifier(SCHEMA))
        )
        params = {
            "scopes": SCOPES,
            "history_scopes": HISTORY_SCOPES,
            "days": DAYS,
            "recent": RECENT_DAYS,
        }
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


def _questions(now: Any) -> dict[str, dict[str, Any]]:
    one = pgsched.Scope("tenant", "t00100")  # a scope with history, superseded plans
    return {
        "one scope, last 24 h": {"scope": one},
        "one scope, the month (50 lines)": {"scope": one, "since": now - timedelta(days=DAYS)},
        "one scope, the week of the pause": {
            "scope": one,
            "since": now - timedelta(days=8),
            "until": now - timedelta(days=6),
        },
        "whole job (10,000 scopes), last 24 h": {},
        "whole job, the week of the pause (50 plans)": {
            "since": now - timedelta(days=8),
            "until": now - timedelta(days=6),
        },
    }


async def measure(dsn: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    async with pgsched.AsyncAdmin(dsn, SCHEMA) as admin:
        now = (await admin.explain("fanout", pgsched.Scope("tenant", "t00001"))).now
        for name, options in _questions(now).items():
            times = []
            for _ in range(RUNS + 1):  # the first warms the caches and the pool
                started = time.perf_counter()
                answer = await admin.explain("fanout", **options)
                times.append((time.perf_counter() - started) * 1000)
            timed = times[1:]
            out[name] = {
                "median_ms": round(statistics.median(timed), 1),
                "max_ms": round(max(timed), 1),
                "lines": len(answer.lines),
            }
            print(
                f"{name:45} median {out[name]['median_ms']:7.1f} ms  max "
                f"{out[name]['max_ms']:7.1f} ms  {len(answer.lines)} lines",
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
            counts = conn.execute(
                sql.SQL(
                    "SELECT (SELECT count(*) FROM {s}.cron_executions),"
                    " (SELECT count(*) FROM {s}.cron_skips)"
                ).format(s=sql.Identifier(SCHEMA))
            ).fetchone()
            version = conn.execute("SHOW server_version").fetchone()
        answers = asyncio.run(measure(dsn))
    finally:
        if not keep:
            with psycopg.connect(dsn, autocommit=True) as conn:
                drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(SCHEMA))
                conn.execute(drop)
    report: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "scopes": SCOPES,
        "ledger_rows": counts[0] if counts else None,
        "skipped_spans": counts[1] if counts else None,
        "postgres": version[0] if version else None,
        "seed_s": seeded,
        "answers": answers,
    }
    OUT.write_text(json.dumps(report, indent=1))
    print(f"written to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
