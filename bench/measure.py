"""What is measured in a window, whatever the timeline: the ledger, the statements, the
processes; and the ratios of every result to the limits.

* The ledger every handler writes to gives completion, duplicates, start lag and throughput
  for every scheduler alike.
* ``pg_stat_statements`` gives the statements and database time (without it, the replicas'
  own counts); pgsched's statements are named after ``sql/queries.sql``.
* ``/proc`` gives each replica's CPU seconds and peak RSS.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

import psycopg

from bench import REPO
from bench.peers.common import LEDGER_TABLE
from bench.registry import CEILINGS

QUERIES_SQL = REPO / "sql" / "queries.sql"
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# -- the machine and the replicas' processes ------------------------------------------------


def loadavg() -> list[float]:
    with contextlib.suppress(OSError):
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    return []


def proc_cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def proc_peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _proc_field(path: str, prefix: str) -> str:
    with contextlib.suppress(OSError):
        for line in Path(path).read_text().splitlines():
            if line.startswith(prefix):
                return line.split(":", 1)[1].strip()
    return ""


def machine() -> dict[str, Any]:
    mem_kib = _proc_field("/proc/meminfo", "MemTotal:").split()
    return {
        "cores": os.cpu_count(),
        "cpu": _proc_field("/proc/cpuinfo", "model name"),
        "memory_gib": round(int(mem_kib[0]) / 1024 / 1024, 1) if mem_kib else 0.0,
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


# -- the ledger -----------------------------------------------------------------------------

LEDGER_STATS = f"""
WITH m AS (SELECT scope, plan_time, started_at, runner FROM {LEDGER_TABLE}
           WHERE plan_time = ANY(%(plans)s)),
firsts AS (SELECT scope, plan_time, min(started_at) AS s
           FROM m GROUP BY scope, plan_time),
lags AS (SELECT plan_time, s, greatest(plan_time, %(origin)s) AS due,
                extract(epoch FROM s - greatest(plan_time, %(origin)s)) AS lag
         FROM firsts)
SELECT (SELECT count(*) FROM firsts),
       (SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY lag) FROM lags),
       (SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY lag) FROM lags),
       (SELECT max(lag) FROM lags),
       (SELECT json_agg(json_build_array(n, span)) FROM
           (SELECT count(*) AS n, extract(epoch FROM max(s) - min(due)) AS span
            FROM lags GROUP BY plan_time) AS per_plan),
       (SELECT extract(epoch FROM max(s) - min(due)) FROM lags),
       (SELECT count(*) - count(DISTINCT (job, scope, plan_time))
        FROM {LEDGER_TABLE}),
       (SELECT max(c) FROM (SELECT count(*) AS c FROM {LEDGER_TABLE}
                            GROUP BY date_trunc('second', started_at)) AS b),
       (SELECT json_object_agg(runner, c) FROM
           (SELECT runner, count(*) AS c FROM m GROUP BY runner) AS r),
       (SELECT count(*) FROM {LEDGER_TABLE})
"""


def completed(dsn: str, plans: list[datetime]) -> int:
    """Distinct (scope, plan) rows of ``plans`` in the ledger."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM (SELECT DISTINCT scope, plan_time FROM "
            f"{LEDGER_TABLE} WHERE plan_time = ANY(%s)) AS d",
            (plans,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def ledger_stats(
    dsn: str, plans: list[datetime], origin: datetime | None, scopes: int
) -> dict[str, Any]:
    """Completion, duplicates, lag and throughput, from the ledger alone."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(LEDGER_STATS, {"plans": plans, "origin": origin or EPOCH}).fetchone()
    assert row is not None
    done, p50, p99, lmax, per_plan, whole, dups, peak, per_runner, executions = row
    due = len(plans) * scopes
    per_plan = per_plan or []
    shares = {}
    if per_runner:
        total = sum(per_runner.values())
        shares = {k: round(v / total, 3) for k, v in sorted(per_runner.items())}
    return {
        "plans": [p.isoformat() for p in plans],
        "due": due,
        "completed": int(done),
        "completion_pct": round(100 * done / due, 2) if due else None,
        "duplicates": int(dups),
        "executions": int(executions),
        "lag_p50_s": _round(p50),
        "lag_p99_s": _round(p99),
        "lag_max_s": _round(lmax),
        "fanout_s": _round(max((float(sp) for _, sp in per_plan), default=None)),
        "plans_per_s": round(fanout_rate(int(done), whole, per_plan, storm=origin is not None), 1),
        "peak_per_s": int(peak or 0),
        "replica_shares": shares,
    }


def fanout_rate(done: int, whole: Any, per_plan: list[Any], storm: bool) -> float:
    """Plans started per second of fan-out: for a catch-up storm the whole backlog (due at
    once) over the time to start it; else each period's plans over the time from their due
    time to the last start, summed over the periods."""
    if storm:
        return done / max(float(whole or 0), 1e-3) if done else 0.0
    spent = sum(max(float(span), 1e-3) for _, span in per_plan)
    return sum(n for n, _ in per_plan) / spent if spent else 0.0


def _round(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


# -- statements -----------------------------------------------------------------------------


class Statements:
    """``pg_stat_statements`` of one database (the ledger's statements left out)."""

    def __init__(self, admin: psycopg.Connection[Any], db: str, enabled: bool) -> None:
        self.admin, self.db, self.enabled = admin, db, enabled

    def _dbid(self) -> int:
        row = self.admin.execute(
            "SELECT oid FROM pg_database WHERE datname = %s", (self.db,)
        ).fetchone()
        assert row is not None
        return int(row[0])

    def reset(self) -> None:
        if self.enabled:
            self.admin.execute("SELECT pg_stat_statements_reset(0, %s, 0)", (self._dbid(),))

    def totals(self) -> tuple[int, float] | None:
        """(calls, total execution ms) since the reset, or None without the extension."""
        if not self.enabled:
            return None
        row = self.admin.execute(
            "SELECT coalesce(sum(calls), 0), coalesce(sum(total_exec_time), 0) "
            "FROM pg_stat_statements WHERE dbid = %s AND query NOT LIKE %s",
            (self._dbid(), f"%{LEDGER_TABLE}%"),
        ).fetchone()
        assert row is not None
        return int(row[0]), float(row[1])

    def top(self, limit: int = 8) -> list[dict[str, Any]]:
        """The statements that took the most database time."""
        if not self.enabled:
            return []
        rows = self.admin.execute(
            "SELECT left(query, 4000), calls, total_exec_time, rows "
            "FROM pg_stat_statements WHERE dbid = %s AND query NOT LIKE %s "
            "ORDER BY total_exec_time DESC LIMIT %s",
            (self._dbid(), f"%{LEDGER_TABLE}%", limit),
        ).fetchall()
        return [
            {"query": statement_text(q), "calls": int(c), "total_ms": round(float(t), 1)}
            | {"rows": int(r)}
            for q, c, t, r in rows
        ]

    def by_name(self) -> dict[str, dict[str, float]] | None:
        """Calls and mean execution ms of pgsched's statements since the reset, by their
        name in sql/queries.sql; None without the extension."""
        if not self.enabled:
            return None
        rows = self.admin.execute(
            "SELECT query, calls, total_exec_time FROM pg_stat_statements WHERE dbid = %s",
            (self._dbid(),),
        ).fetchall()
        named: dict[str, list[float]] = {}
        for query, calls, total in rows:
            name = pgsched_statement(str(query))
            if name is not None:
                sums = named.setdefault(name, [0.0, 0.0])
                sums[0] += int(calls)
                sums[1] += float(total)
        return {
            name: {"calls": int(calls), "mean_ms": round(total / calls, 3)}
            for name, (calls, total) in sorted(named.items())
            if calls
        }

    def claims(self) -> dict[str, Any]:
        """Database time and rows of the claim statements (see :func:`claim_part`)."""
        if not self.enabled:
            return {}
        rows = self.admin.execute(
            "SELECT query, calls, total_exec_time, rows FROM pg_stat_statements "
            "WHERE dbid = %s AND query NOT LIKE %s",
            (self._dbid(), f"%{LEDGER_TABLE}%"),
        ).fetchall()
        return claim_stats([(str(q), int(c), float(t), int(r)) for q, c, t, r in rows])


# The raw limits' claim: one batched INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING
# (bench/peers/raw.py), as pg_stat_statements shows it.
_RAW_CLAIM = re.compile(r"^\s*INSERT INTO pgsched\.cron_executions AS x\b.*\bunnest\b", re.S)
# pgsched's claim in two halves (sql/queries.sql): the due cursors (or stored schedules) read
# and locked, then their RUNNING rows inserted and the cursors moved on; of one job, or of
# several at once (a joint claim).
_LOOKUPS = frozenset({"due_cursors", "due_schedules", "due_cursors_of_jobs"})
_INSERTS = frozenset({"claim_cursors", "claim_schedules", "claim_cursors_of_jobs"})


def claim_part(query: str) -> str | None:
    """The part of a claim ``query`` is: "insert" (it inserts the claimed rows), "lookup" (it
    reads what is due for one), None (no part of a claim)."""
    if _RAW_CLAIM.match(query):
        return "insert"
    name = pgsched_statement(query)
    if name in _INSERTS:
        return "insert"
    return "lookup" if name in _LOOKUPS else None


def claim_stats(rows: list[tuple[str, int, float, int]]) -> dict[str, Any]:
    """Claim database time per claimed row: both halves of a claim over the rows the
    inserting statements returned (pgsched's claim_cursors returns one row even when it
    inserted none, so its count can only flatter the raw limit's)."""
    ms = inserted = calls = 0.0
    for query, n, total_ms, returned in rows:
        part = claim_part(query)
        if part is None:
            continue
        ms += total_ms
        calls += n
        if part == "insert":
            inserted += returned
    if not inserted:
        return {}
    return {
        "claim_db_ms": round(ms, 1),
        "claim_statements": int(calls),
        "claimed_rows": int(inserted),
        "claim_us_per_row": round(1000 * ms / inserted, 2),
    }


def statement_stats(
    stmts: tuple[int, float] | None,
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    window: float,
    replicas: int,
) -> dict[str, Any]:
    """Statements and database time per tick (one tick a second per replica)."""
    ticks = max(window, 1e-9) * replicas
    if stmts is not None:
        calls, ms = stmts
        source = "pg_stat_statements"
    elif after and all("statements" in c for c in after):
        pairs = list(zip(after, before, strict=True))
        calls = sum(a["statements"] - b.get("statements", 0) for a, b in pairs)
        ms = 1000 * sum(a["statement_s"] - b.get("statement_s", 0.0) for a, b in pairs)
        source = "client"  # round trips, timed by the replicas
    else:
        return {"statements_source": "n/a"}
    return {
        "statements_source": source,
        "statements": calls,
        "statements_per_tick": round(calls / ticks, 2),
        "db_ms_per_tick": round(ms / ticks, 2),
    }


def statement_text(query: str) -> str:
    """A statement on one line, without its comment lines, cut to 160 characters; pgsched's
    own statements are prefixed with their name in sql/queries.sql."""
    lines = [ln.strip() for ln in query.splitlines() if not ln.strip().startswith("--")]
    text = " ".join(" ".join(lines).split())[:160]
    name = pgsched_statement(query)
    return f"{name}: {text}" if name else text


@cache
def pgsched_queries() -> dict[str, list[str]]:
    """The leading words of every statement of ``sql/queries.sql`` (``-- name: x :kind``),
    read as a text file, by name."""
    try:
        text = QUERIES_SQL.read_text(encoding="utf-8")
    except OSError:
        return {}
    parts = re.split(r"^-- name: (\w+) :\w+[ \t]*$", text, flags=re.MULTILINE)
    return {
        name: _words(body.replace("{schema}", "pgsched"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


def _words(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if not ln.strip().startswith("--")]
    body = re.sub(r"%\(\w+\)s", " ", " ".join(lines))  # parameters are $n in the server's text
    return re.findall(r"[A-Za-z_]{2,}", body)[:60]


def pgsched_statement(query: str) -> str | None:
    """The name in sql/queries.sql of the statement ``query`` (as pg_stat_statements shows
    it), by the longest run of leading words in common."""
    words = _words(query)
    best, best_len = None, 0
    for name, mine in pgsched_queries().items():
        common_len = 0
        for a, b in zip(words, mine, strict=False):
            if a.lower() != b.lower():
                break
            common_len += 1
        if common_len > best_len:
            best, best_len = name, common_len
    return best if best_len >= 8 or (best_len >= 3 and best_len == len(words)) else None


# -- ratios to the limits -------------------------------------------------------------------


def add_ratios(results: list[dict[str, Any]]) -> None:
    """Every ok result's plans/s, fan-out time, p99 start lag and claim database time per
    claimed row as ratios to each limit's on the same workload: ``ratio_to_<ceiling>``
    (plans/s ÷ the limit's), ``fanout_to_<ceiling>`` (fan-out seconds ÷ the limit's: how
    many times as long), ``p99_to_<ceiling>`` and ``claim_per_row_to_<ceiling>``."""
    for key, suffix in CEILINGS.items():
        limits = {r["workload"]: r for r in results if r["scheduler"] == key}
        for r in results:
            limit = limits.get(r["workload"])
            if limit is None or r.get("status") != "ok":
                continue
            if limit.get("plans_per_s") and "plans_per_s" in r:
                r[f"ratio_to_{suffix}"] = round(r["plans_per_s"] / limit["plans_per_s"], 3)
            if limit.get("fanout_s") and r.get("fanout_s") is not None:
                r[f"fanout_to_{suffix}"] = round(r["fanout_s"] / limit["fanout_s"], 2)
            if limit.get("lag_p99_s") and r.get("lag_p99_s") is not None:
                r[f"p99_to_{suffix}"] = round(r["lag_p99_s"] / limit["lag_p99_s"], 2)
            if limit.get("claim_us_per_row") and r.get("claim_us_per_row") is not None:
                r[f"claim_per_row_to_{suffix}"] = round(
                    r["claim_us_per_row"] / limit["claim_us_per_row"], 2
                )
