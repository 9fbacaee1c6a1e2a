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

import functools
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pgsched
from bench.seeded import SeededSchema, main, timed

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
    # Partitions for the month back (the replicas made each day's as it came).
    "SELECT {s}.cron_ensure_partitions(ARRAY(SELECT generate_series("
    " now() - interval '32 days', now(), interval '1 day')))",
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


SEEDED = SeededSchema(
    SCHEMA,
    SEED,
    {"scopes": SCOPES, "history_scopes": HISTORY_SCOPES, "days": DAYS, "recent": RECENT_DAYS},
    {"ledger_rows": "cron_executions", "skipped_spans": "cron_skips"},
)


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


async def measure(dsn: str) -> dict[str, Any]:
    answers: dict[str, dict[str, float]] = {}
    async with pgsched.AsyncAdmin(dsn, SCHEMA) as admin:
        now = (await admin.explain("fanout", pgsched.Scope("tenant", "t00001"))).now
        for name, options in _questions(now).items():
            ask = functools.partial(admin.explain, "fanout", **options)
            figures, answer = await timed(ask, RUNS)
            answers[name] = {**figures, "lines": len(answer.lines)}
            print(
                f"{name:45} median {figures['median_ms']:7.1f} ms  max "
                f"{figures['max_ms']:7.1f} ms  {len(answer.lines)} lines",
                flush=True,
            )
    return {"answers": answers}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], SEEDED, measure, OUT, {"scopes": SCOPES}))
