"""``python -m bench.ledger``: what one execution costs the ledger, and what retention costs.

Three figures, each on a private PostgreSQL the run starts itself (or ``--dsn``):

- **WAL per execution**: one pgsched replica (``pgsched run``, a trivial handler that writes
  nothing) runs a fan-out of ``--scopes`` every ``--every`` seconds. After a warm-up, a
  ``CHECKPOINT`` and ``--settle`` seconds (so the full-page images a checkpoint causes are
  past), ``pg_stat_wal`` is read before and after a window of ``--window`` seconds and
  divided by the window's executions (rows claimed plus rows finished in it, halved): WAL
  bytes, WAL records and full-page images per execution. Nothing else writes to the server.
- **Bytes per row at rest**: ``--rows`` finished rows of history, shaped as pgsched writes
  them (a SUCCESS row per plan and scope), inserted by SQL, then ``VACUUM ANALYZE``: the
  table's heap and its indexes, each divided by the rows.
- **Retention**: ``pgsched prune --older-than`` removing that history: seconds and WAL
  bytes.

Results print as JSON and go to ``bench/results/ledger-<time>.json``. Figures depend on the
server's settings (``full_page_writes`` on, as in production) and are read against each
other in the same run, never against another machine's.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.live import database, live_options, replica, write_result
from bench.pg import one, wal
from bench.shared import RESULTS

SCHEMA = "pgsched"

APP = textwrap.dedent(
    """
    import os
    import pgsched

    scheduler = pgsched.Scheduler(runner_id="ledger", tick_interval="1s",
                                  max_concurrency=int(os.environ["LEDGER_SCOPES"]))

    @scheduler.job(every=int(os.environ["LEDGER_EVERY"]), run_timeout="5m",
                   scopes=[pgsched.Scope("tenant", str(i))
                           for i in range(int(os.environ["LEDGER_SCOPES"]))])
    async def ledger_cost(run: pgsched.Run) -> None:
        return None
    """
)

# History shaped as pgsched's finished rows: one per (scope, plan), a day of plans apart;
# each row of a plan created a millisecond after the one before (as a claim writes them:
# no two rows share a creation time).
FILL = """
INSERT INTO {table} (job_name, scope_kind, scope_id, plan_time, trigger, status, attempt,
    max_attempts, runner_id, lease_token, fencing_token, heartbeat_at, stale_after, started_at,
    finished_at, duration_ms, result, created_at, updated_at)
SELECT 'history', 'tenant', (i %% %(scopes)s)::text, t, 'schedule', 'SUCCESS', 1, 1,
       'ledger', gen_random_uuid(), i, c, c + interval '1 minute', c, c, 3, '{{}}', c, c
FROM generate_series(0, %(rows)s - 1) AS i,
     LATERAL (SELECT %(start)s + make_interval(secs => (i / %(scopes)s) * 60) AS t) AS s,
     LATERAL (SELECT t + make_interval(secs => (i %% %(scopes)s) * 0.001) AS c) AS m
"""


# The leaves of a partitioned table or index, or the relation itself when it is a plain one.
LEAVES = (
    "(SELECT relid FROM pg_partition_tree({0}) WHERE isleaf"
    " UNION ALL SELECT ({0})::regclass WHERE NOT EXISTS"
    " (SELECT 1 FROM pg_partition_tree({0}) WHERE isleaf AND relid <> ({0})::regclass)) l"
)


def written(conn: psycopg.Connection[Any]) -> float:
    """Rows claimed plus rows finished, halved: an execution's two writes. The window's WAL
    holds the claims and the finishes that fell in it; counting finishes alone was off by
    a whole fan-out when one fan-out's claim and finish fell on opposite sides of an edge."""
    q = sql.SQL("SELECT count(*) + count(finished_at) FROM {}.cron_executions")
    row = conn.execute(q.format(sql.Identifier(SCHEMA))).fetchone()
    return int(row[0]) / 2 if row else 0.0


def live_wal(dsn: str, args: argparse.Namespace) -> dict[str, Any]:
    """WAL per execution of a live fan-out (the first figure)."""
    env = {"LEDGER_SCOPES": str(args.scopes), "LEDGER_EVERY": str(args.every)}
    with replica(dsn, APP, env), psycopg.connect(dsn, autocommit=True) as conn:
        time.sleep(args.warmup)
        inspect = _walinspect(conn)
        conn.execute("CHECKPOINT")
        time.sleep(args.settle)
        before, done_before, first = wal(conn), written(conn), _insert_lsn(conn)
        time.sleep(args.window)
        after, done_after, last = wal(conn), written(conn), _insert_lsn(conn)
        runs = done_after - done_before
        records = _records_by_relation(conn, first, last, runs) if inspect and runs else None
    per = {k: (after[k] - before[k]) / runs if runs else None for k in before}
    return {
        "executions": runs,
        "wal_bytes_per_execution": per["bytes"],
        "wal_records_per_execution": per["records"],
        "wal_fpi_per_execution": per["fpi"],
        "window_s": args.window,
        "wal_records_by_relation": records,
    }


def _walinspect(conn: psycopg.Connection[Any]) -> bool:
    """pg_walinspect (PostgreSQL 15+, contrib) loaded, where the server has it."""
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    except psycopg.Error:
        return False
    return True


def _insert_lsn(conn: psycopg.Connection[Any]) -> str:
    """The WAL written so far, once flushed (pg_walinspect reads only flushed WAL)."""
    lsn = str(one(conn, "SELECT pg_current_wal_insert_lsn()::text")[0])
    flushed = "SELECT pg_current_wal_flush_lsn() >= %s::pg_lsn"
    deadline = time.monotonic() + 10
    while not one(conn, flushed, (lsn,))[0] and time.monotonic() < deadline:
        time.sleep(0.05)  # the WAL writer flushes within wal_writer_delay (200 ms)
    return lsn


def _records_by_relation(
    conn: psycopg.Connection[Any], first: str, last: str, runs: float
) -> list[dict[str, Any]]:
    """The window's WAL records per execution by relation and record type (pg_walinspect):
    which table or index each record of an execution goes to."""
    rows = conn.execute(
        "WITH r AS (SELECT resource_manager AS rm, split_part(record_type, ' ', 1) AS type,"
        " record_length + fpi_length AS bytes,"
        " (regexp_match(block_ref, 'rel \\d+/\\d+/(\\d+)'))[1]::oid AS node"
        " FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn))"
        " SELECT coalesce(regexp_replace(c.relname, '_\\d{8}T\\d+', '_<partition>'), '-'),"
        " r.rm, r.type, count(*)::float8 / %s, sum(r.bytes)::float8 / %s"
        " FROM r LEFT JOIN pg_class c ON c.relfilenode = r.node"
        " GROUP BY 1, 2, 3 HAVING count(*)::float8 / %s >= 0.01 ORDER BY 4 DESC",
        (first, last, runs, runs, runs),
    ).fetchall()
    return [
        {"relation": rel, "kind": f"{rm} {kind}", "records": round(n, 3), "bytes": round(b, 1)}
        for rel, rm, kind, n, b in rows
    ]


def at_rest(conn: psycopg.Connection[Any], args: argparse.Namespace) -> dict[str, Any]:
    """Bytes per finished row, heap and each index (the second figure)."""
    table = sql.SQL("{}.cron_executions").format(sql.Identifier(SCHEMA))
    start = datetime(2020, 1, 1, tzinfo=UTC)
    ensure = f"{SCHEMA}.cron_ensure_partitions"
    if one(conn, "SELECT to_regproc(%s) IS NOT NULL", (ensure,))[0]:
        # A partitioned ledger: the history's day gets its partition first, as a backfill's does.
        minutes = args.rows // 1000 + 1
        conn.execute(
            sql.SQL(
                "SELECT {}(ARRAY[%s::timestamptz, %s::timestamptz + make_interval(mins => %s)])"
            ).format(sql.Identifier(SCHEMA, "cron_ensure_partitions")),
            (start, start, minutes),
        )
    conn.execute(
        sql.SQL(FILL).format(table=table), {"scopes": 1000, "rows": args.rows, "start": start}
    )
    conn.execute(sql.SQL("VACUUM ANALYZE {}").format(table))
    rows = one(conn, sql.SQL("SELECT count(*) FROM {}").format(table))[0]
    # Summed over the partitions, should the table be partitioned (a plain table is its own
    # only leaf); each index under its top-level name, a partition's own index (not one of
    # the parent's) under its name with the partition's part made generic.
    name = f"{SCHEMA}.cron_executions"
    sizes = conn.execute(
        "SELECT coalesce(r.relname, regexp_replace(c.relname,"
        " '^cron_executions_([0-9]{8}T[0-9]{6}|default|legacy)_', 'cron_executions_<part>_')),"
        " sum(pg_relation_size(i.indexrelid))"
        f" FROM {LEAVES.format('%(t)s::regclass')}"
        " JOIN pg_index i ON i.indrelid = l.relid JOIN pg_class c ON c.oid = i.indexrelid"
        " LEFT JOIN pg_class r ON r.oid = pg_partition_root(i.indexrelid)"
        " AND r.oid <> i.indexrelid GROUP BY 1 ORDER BY 2 DESC",
        {"t": name},
    ).fetchall()
    heap = one(
        conn,
        "SELECT sum(pg_relation_size(relid)), sum(pg_table_size(relid))"
        f" FROM {LEAVES.format('%(t)s::regclass')}",
        {"t": name},
    )
    indexes = {index: float(size) / rows for index, size in sizes}
    return {
        "rows": rows,
        "heap_bytes_per_row": float(heap[0]) / rows,
        "table_bytes_per_row": float(heap[1])
        / rows,  # heap + TOAST + free space and visibility maps
        "index_bytes_per_row": sum(indexes.values()),
        "indexes": len(indexes),
        "bytes_per_row_by_index": indexes,
        "bytes_per_row": float(heap[1]) / rows + sum(indexes.values()),
    }


def retention(dsn: str, conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """``pgsched prune`` of the history (the third figure)."""
    before, started = wal(conn), time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "pgsched", "prune", "--older-than", "1d"],
        env=dict(os.environ, PGSCHED_DSN=dsn, PGSCHED_SCHEMA=SCHEMA),
        capture_output=True,
        text=True,
        check=True,
    )
    seconds = time.monotonic() - started
    after = wal(conn)
    return {
        "command": "pgsched prune --older-than 1d",
        "output": out.stdout.strip()[-200:],
        "seconds": round(seconds, 2),
        "wal_bytes": after["bytes"] - before["bytes"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = live_options(
        "python -m bench.ledger", __doc__, every=5, warmup=15.0, window=30.0, rows=1_000_000
    )
    parser.add_argument("--settle", type=float, default=40.0)
    parser.add_argument("--results-dir", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    with database(args.dsn, "ledger_cost") as (_, dsn):
        result: dict[str, Any] = {"when": datetime.now(UTC).isoformat(), "args": vars(args)}
        result["live"] = live_wal(dsn, args)
        with psycopg.connect(dsn, autocommit=True) as conn:
            result["at_rest"] = at_rest(conn, args)
            result["retention"] = retention(dsn, conn)
    write_result(args.results_dir, "ledger", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
