"""How long the dashboard's pages take to render at scale: ``python -m bench.dashboard DSN``.

Seeds a schema of its own (dropped afterwards) with a dynamic job of 1,000,000 schedules (two
runs each in the ledger) and a code-defined job of 100,000 scopes x 30 plans, as replicas
would have left them, then renders each page through the dashboard itself (the operations
core over an AsyncAdmin's pool, the HTML included; no HTTP) and prints the median and
slowest of several renders. Results go to bench/results/dashboard.json.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import pgsched
from bench.seeded import SeededSchema, main, timed
from pgsched._facades.http.auth import Tokens
from pgsched._facades.http.web import Dashboard, WebRequest

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


SEEDED = SeededSchema(
    SCHEMA, SEED, {"schedules": SCHEDULES, "scopes": FANOUT_SCOPES, "plans": FANOUT_PLANS}
)


async def measure(dsn: str) -> dict[str, Any]:
    pages: dict[str, dict[str, float]] = {}
    async with pgsched.AsyncAdmin(dsn, SCHEMA) as admin:
        board = Dashboard(admin, tokens=Tokens(None, None))
        for name, (path, query) in PAGES.items():
            req = WebRequest("GET", path, query, {}, {}, {}, "/")
            figures, answer = await timed(functools.partial(board.handle, req), RENDERS)
            assert answer.status == 200, (name, answer.status, answer.body[-500:])
            pages[name] = {**figures, "html_kb": round(len(answer.body) / 1024, 1)}
            print(
                f"{name:40} median {figures['median_ms']:8.1f} ms  max "
                f"{figures['max_ms']:8.1f} ms  {pages[name]['html_kb']} KiB",
                flush=True,
            )
    return {"pages": pages}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], SEEDED, measure, OUT, {"schedules": SCHEDULES}))
