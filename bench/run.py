"""``python -m bench``: pgsched side by side with its peers and the physical limit.

For every workload and every scheduler it creates a fresh database, starts N replica
processes, lets them run for whole periods, and reads the results from the ledger every
handler writes to (plans due and completed, duplicates, start lag), from pg_stat_statements
(statements and database time; counted by the clients when the server lacks it) and from
/proc (CPU seconds and peak RSS per replica). Results go to ``bench/results/`` as JSON and,
unless ``--no-docs``, into ``docs/performance.md`` and ``docs/performance.png``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench import pg
from bench.peers import common

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
PEERS_VENV = REPO / "bench" / ".venv-peers"
PEERS_REQUIREMENTS = REPO / "bench" / "requirements-peers.txt"
SCHEDULERS = ("raw", "pgsched", "seed", "pgqueuer", "procrastinate")
PEERS = ("pgqueuer", "procrastinate")
LABELS = {
    "raw": "raw batched SQL (limit)",
    "pgsched": "pgsched",
    "seed": "seed design (baseline)",
    "pgqueuer": "pgqueuer 1.6.0",
    "procrastinate": "procrastinate 3.10.0",
}


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    scopes: int
    every_s: int
    periods: int = 3  # whole periods measured (regular workloads)
    catch_up: bool = False  # every_plan after `downtime_s` of downtime
    downtime_s: int = 0
    idle: bool = False  # nothing due: the cost of idle ticks
    window_s: int = 20  # idle: length of the window; catch-up: longest wait for the backlog
    peers: bool = True  # whether pgqueuer and procrastinate can run it at all
    why_no_peers: str = ""


WORKLOADS = {
    w.key: w
    for w in (
        Workload("a", "200 scopes / 5 s", 200, 5, periods=4),
        Workload("b", "2,000 scopes / 10 s", 2_000, 10, periods=3),
        Workload("c", "10,000 scopes / 10 s", 10_000, 10, periods=3),
        Workload("d", "100,000 scopes / 60 s", 100_000, 60, periods=2),
        Workload(
            "e",
            "catch-up storm: 10,000 scopes, every_plan, 10 min down (60 s cadence)",
            10_000,
            60,
            catch_up=True,
            downtime_s=600,
            window_s=150,
            peers=False,
            why_no_peers="has no every-plan catch-up across a restart: it runs a missed "
            "schedule once at most",
        ),
        Workload("f", "idle: 100,000 scopes, nothing due", 100_000, 3600, idle=True, window_s=20),
    )
}


# -- helpers ------------------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


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


def machine() -> dict[str, Any]:
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gib = 0.0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_gib = int(line.split()[1]) / 1024 / 1024
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(mem_gib, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def peers_python(install: bool) -> tuple[str | None, str]:
    """The peers' virtualenv interpreter (created from the pinned requirements), or why not."""
    python = PEERS_VENV / "bin" / "python"
    marker = PEERS_VENV / ".requirements"
    wanted = PEERS_REQUIREMENTS.read_text()
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return str(python), ""
    if not install:
        return None, "the peers' virtualenv is missing and --no-install was given"
    log(f"creating the peers' virtualenv {PEERS_VENV} from {PEERS_REQUIREMENTS.name}")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "-r", str(PEERS_REQUIREMENTS)],
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return None, f"could not install the pinned peers: {detail.strip()[-300:]}"
    marker.write_text(wanted)
    return str(python), ""


# -- one run ------------------------------------------------------------------------------


@dataclass
class Options:
    replicas: int = 3
    concurrency: int = 2000
    ledger_pool: int = 8
    warmup_s: float = 8.0
    drain_cap_s: float = 60.0
    keep_databases: bool = False


class Run:
    """One scheduler on one workload, in a database of its own."""

    def __init__(
        self,
        server: pg.Server,
        wl: Workload,
        scheduler: str,
        opts: Options,
        python: str,
        run_dir: Path,
    ) -> None:
        self.server, self.wl, self.sched, self.opts = server, wl, scheduler, opts
        self.python = python
        self.db = f"bench_{wl.key}_{scheduler}_{secrets.token_hex(3)}"
        self.dsn = server.dsn(self.db)
        self.run_dir = run_dir / f"{wl.key}-{scheduler}"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.admin = psycopg.connect(server.admin_dsn, autocommit=True)
        self.clock_offset = 0.0

    # clocks: plans are computed on the database's clock; waits use time.time() + offset.
    def db_now(self) -> datetime:
        row = self.admin.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        now: datetime = row[0]
        self.clock_offset = now.timestamp() - time.time()
        return now

    def now(self) -> datetime:
        return datetime.fromtimestamp(time.time() + self.clock_offset, UTC)

    def sleep_until(self, t: datetime) -> None:
        while True:
            left = (t - self.now()).total_seconds()
            if left <= 0:
                return
            time.sleep(min(left, 0.5))

    def close(self) -> None:
        self.stop_replicas()
        if not self.opts.keep_databases:
            with contextlib.suppress(Exception):
                self.admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(self.db)
                    )
                )
        self.admin.close()

    # -- set-up ---------------------------------------------------------------------------

    def setup(self) -> None:
        self.admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.db)))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(common.LEDGER_DDL)
        if self.sched in ("raw", "pgsched", "seed"):
            import pgsched

            pgsched.Admin(dsn=self.dsn).migrate()
        elif self.sched in PEERS:
            subprocess.run(
                [self.python, "-m", f"bench.peers.{self.sched}_peer", "setup"],
                check=True,
                env=self.env(0),
                cwd=REPO,
                capture_output=True,
                timeout=120,
            )

    def prepopulate(self, plan: datetime) -> None:
        """Mark ``plan`` as already run for every scope, as a previous run would have."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            if self.sched in ("raw", "pgsched", "seed"):
                conn.execute(
                    "INSERT INTO pgsched.cron_executions (job_name, scope_kind, scope_id, "
                    "plan_time, trigger, status, attempt, max_attempts, started_at, "
                    "finished_at) SELECT %s, 'tenant', lpad(i::text, 6, '0'), %s, 'schedule', "
                    "'SUCCESS', 1, 1, %s, %s FROM generate_series(0, %s - 1) AS i",
                    ("bench", plan, plan, plan, self.wl.scopes),
                )
                conn.execute("ANALYZE pgsched.cron_executions")
            elif self.sched == "procrastinate":
                conn.execute(
                    "INSERT INTO procrastinate_periodic_defers (task_name, periodic_id, "
                    "defer_timestamp) SELECT 'bench', lpad(i::text, 6, '0'), %s "
                    "FROM generate_series(0, %s - 1) AS i ON CONFLICT DO NOTHING",
                    (int(plan.timestamp()), self.wl.scopes),
                )

    def config(self, replica: int) -> dict[str, Any]:
        window = self.wl.downtime_s + 60 if self.wl.catch_up else 0
        return {
            "dsn": self.dsn,
            "job": "bench",
            "scopes": self.wl.scopes,
            "every_s": self.wl.every_s,
            "catch_up": "every_plan" if self.wl.catch_up else "latest_only",
            "catch_up_window_s": window,
            "max_plans_per_tick": 100 if self.wl.catch_up else 1,
            "replica": replica,
            "replicas": self.opts.replicas,
            "run_dir": str(self.run_dir),
            "concurrency": self.opts.concurrency,
            "ledger_pool": self.opts.ledger_pool,
        }

    def env(self, replica: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PGSCHED_DSN", "DATABASE_URL")}
        env.update(
            PYTHONPATH=str(REPO),
            BENCH_CONFIG=json.dumps(self.config(replica)),
            BENCH_DSN=self.dsn,
            PGSCHED_LOG_LEVEL="warning",
            PYTHONUNBUFFERED="1",
        )
        return env

    def command(self) -> list[str]:
        if self.sched == "pgsched":
            return [
                self.python,
                "-m",
                "pgsched",
                "--dsn",
                self.dsn,
                "run",
                "bench.peers.pgsched_app",
                "--no-http",
            ]
        module = {"raw": "raw", "seed": "seed"}.get(self.sched, f"{self.sched}_peer")
        return [self.python, "-m", f"bench.peers.{module}"]

    def start_replicas(self) -> None:
        for i in range(self.opts.replicas):
            out = open(self.run_dir / f"replica-{i}.log", "wb")  # noqa: SIM115
            self.procs.append(
                subprocess.Popen(
                    self.command(),
                    cwd=REPO,
                    env=self.env(i),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )

    def stop_replicas(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 40
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        self.procs = []

    # -- statistics -----------------------------------------------------------------------

    def dbid(self) -> int:
        row = self.admin.execute(
            "SELECT oid FROM pg_database WHERE datname = %s", (self.db,)
        ).fetchone()
        assert row is not None
        return int(row[0])

    def reset_statements(self) -> None:
        if self.server.has_pgss:
            self.admin.execute("SELECT pg_stat_statements_reset(0, %s, 0)", (self.dbid(),))

    def statements(self) -> tuple[int, float] | None:
        if not self.server.has_pgss:
            return None
        row = self.admin.execute(
            "SELECT coalesce(sum(calls), 0), coalesce(sum(total_exec_time), 0) "
            "FROM pg_stat_statements WHERE dbid = %s AND query NOT LIKE %s",
            (self.dbid(), f"%{common.LEDGER_TABLE}%"),
        ).fetchone()
        assert row is not None
        return int(row[0]), float(row[1])

    def top_statements(self, limit: int = 8) -> list[dict[str, Any]]:
        """The statements that took the most database time (the ledger's excluded)."""
        if not self.server.has_pgss:
            return []
        rows = self.admin.execute(
            "SELECT left(query, 4000), calls, total_exec_time, rows "
            "FROM pg_stat_statements WHERE dbid = %s AND query NOT LIKE %s "
            "ORDER BY total_exec_time DESC LIMIT %s",
            (self.dbid(), f"%{common.LEDGER_TABLE}%", limit),
        ).fetchall()
        return [
            {"query": statement_text(q), "calls": int(c), "total_ms": round(float(t), 1)}
            | {"rows": int(r)}
            for q, c, t, r in rows
        ]

    def client_counters(self) -> list[dict[str, Any]]:
        out = []
        for i in range(self.opts.replicas):
            path = self.run_dir / f"replica-{i}.json"
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                out.append({})
        return out

    def cpu(self) -> list[float | None]:
        return [proc_cpu_s(p.pid) for p in self.procs]

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def completed(self, plans: list[datetime]) -> int:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(
                f"SELECT count(*) FROM (SELECT DISTINCT scope, plan_time FROM "
                f"{common.LEDGER_TABLE} WHERE plan_time = ANY(%s)) AS d",
                (plans,),
            ).fetchone()
        assert row is not None
        return int(row[0])

    # -- the run --------------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        wl, every = self.wl, timedelta(seconds=self.wl.every_s)
        load = loadavg()
        self.setup()
        now = self.db_now()
        warmup = timedelta(seconds=self.opts.warmup_s + wl.scopes / 25_000)
        if wl.idle or wl.catch_up:
            spawn = now
        else:
            t0 = common.floor_plan(now + warmup + timedelta(seconds=1), wl.every_s) + every
            spawn = t0 - warmup
        current = common.floor_plan(spawn, wl.every_s)
        base = current - timedelta(seconds=wl.downtime_s) if wl.catch_up else current
        self.prepopulate(base)
        self.sleep_until(spawn)
        if wl.catch_up:
            self.reset_statements()
        self.start_replicas()
        spawned = self.now()
        if wl.catch_up:
            t0 = spawned
            cpu0 = [0.0] * len(self.procs)
            counters0: list[dict[str, Any]] = [{} for _ in self.procs]
            deadline = t0 + timedelta(seconds=wl.window_s)
            while self.now() < deadline and self.alive():
                time.sleep(2)
                due = plans_between(base, self.now(), wl.every_s)
                if self.completed(due) >= len(due) * wl.scopes:
                    break
            plans = plans_between(base, self.now(), wl.every_s)
            origin: datetime | None = spawned
        else:
            if wl.idle:
                t0 = spawned + warmup
            self.sleep_until(t0)
            self.reset_statements()
            cpu0 = [c or 0.0 for c in self.cpu()]
            counters0 = self.client_counters()
            if wl.idle:
                self.sleep_until(t0 + timedelta(seconds=wl.window_s))
                plans = []
            else:
                last = t0 + every * (wl.periods - 1)
                plans = [t0 + every * k for k in range(wl.periods)]
                self.sleep_until(last + timedelta(seconds=1))
                cap = last + timedelta(seconds=min(wl.every_s, self.opts.drain_cap_s))
                while self.now() < cap and self.alive():
                    if self.completed(plans) >= len(plans) * wl.scopes:
                        break
                    time.sleep(1)
            origin = None
        t1 = self.now()
        stmts = self.statements()
        top = self.top_statements()
        cpu1 = self.cpu()
        rss = [proc_peak_rss_mb(p.pid) for p in self.procs]
        counters1 = self.client_counters()
        crashed = [i for i, p in enumerate(self.procs) if p.poll() is not None]
        self.stop_replicas()
        window = (t1 - t0).total_seconds()
        result: dict[str, Any] = {
            "workload": wl.key,
            "scheduler": self.sched,
            "status": "ok" if not crashed else "crashed",
            "reason": f"replicas {crashed} exited early (see their logs)" if crashed else "",
            "replicas": self.opts.replicas,
            "scopes": wl.scopes,
            "every_s": wl.every_s,
            "window_s": round(window, 2),
            "loadavg_before": load,
            "loadavg_after": loadavg(),
            "cpu_s": [
                None if c1 is None else round(c1 - c0, 2) for c0, c1 in zip(cpu0, cpu1, strict=True)
            ],
            "peak_rss_mb": [None if r is None else round(r, 1) for r in rss],
        }
        result.update(self.ledger_stats(plans, origin))
        result.update(self.statement_stats(stmts, counters0, counters1, window))
        result["top_statements"] = top
        if self.sched == "raw":
            result.update(raw_rates(counters1))
        return result

    def ledger_stats(self, plans: list[datetime], origin: datetime | None) -> dict[str, Any]:
        """Completion, duplicates, lag and throughput, from the ledger alone."""
        q = f"""
        WITH m AS (SELECT scope, plan_time, started_at, runner FROM {common.LEDGER_TABLE}
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
                FROM {common.LEDGER_TABLE}),
               (SELECT max(c) FROM (SELECT count(*) AS c FROM {common.LEDGER_TABLE}
                                    GROUP BY date_trunc('second', started_at)) AS b),
               (SELECT json_object_agg(runner, c) FROM
                   (SELECT runner, count(*) AS c FROM m GROUP BY runner) AS r),
               (SELECT count(*) FROM {common.LEDGER_TABLE})
        """
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(
                q, {"plans": plans, "origin": origin or datetime(1970, 1, 1, tzinfo=UTC)}
            ).fetchone()
        assert row is not None
        completed, p50, p99, lmax, per_plan, whole, dups, peak, per_runner, executions = row
        due = len(plans) * self.wl.scopes
        per_plan = per_plan or []
        if origin is not None:  # a catch-up storm: the whole backlog was due at once
            rate = completed / max(float(whole or 0), 1e-3) if completed else 0.0
        else:  # each period's fan-out: plans started / time from due to the last start
            spent = sum(max(float(span), 1e-3) for _, span in per_plan)
            rate = sum(n for n, _ in per_plan) / spent if spent else 0.0
        shares = {}
        if per_runner:
            total = sum(per_runner.values())
            shares = {k: round(v / total, 3) for k, v in sorted(per_runner.items())}
        return {
            "plans": [p.isoformat() for p in plans],
            "due": due,
            "completed": int(completed),
            "completion_pct": round(100 * completed / due, 2) if due else None,
            "duplicates": int(dups),
            "executions": int(executions),
            "lag_p50_s": _round(p50),
            "lag_p99_s": _round(p99),
            "lag_max_s": _round(lmax),
            "fanout_s": _round(max((float(sp) for _, sp in per_plan), default=None)),
            "plans_per_s": round(rate, 1),
            "peak_per_s": int(peak or 0),
            "replica_shares": shares,
        }

    def statement_stats(
        self,
        stmts: tuple[int, float] | None,
        before: list[dict[str, Any]],
        after: list[dict[str, Any]],
        window: float,
    ) -> dict[str, Any]:
        ticks = max(window, 1e-9) * self.opts.replicas  # one tick a second per replica
        if stmts is not None:
            calls, ms = stmts
            return {
                "statements_source": "pg_stat_statements",
                "statements": calls,
                "statements_per_tick": round(calls / ticks, 2),
                "db_ms_per_tick": round(ms / ticks, 2),
            }
        if all("statements" in c for c in after) and after:
            calls = sum(
                a["statements"] - b.get("statements", 0) for a, b in zip(after, before, strict=True)
            )
            secs = sum(
                a["statement_s"] - b.get("statement_s", 0.0)
                for a, b in zip(after, before, strict=True)
            )
            return {
                "statements_source": "client",
                "statements": calls,
                "statements_per_tick": round(calls / ticks, 2),
                "db_ms_per_tick": round(1000 * secs / ticks, 2),  # round trips, client side
            }
        return {"statements_source": "n/a"}


def statement_text(query: str) -> str:
    """A statement on one line, without its comment lines, cut to 160 characters; pgsched's
    own statements are prefixed with their name in sql/queries.sql."""
    lines = [ln.strip() for ln in query.splitlines() if not ln.strip().startswith("--")]
    text = " ".join(" ".join(lines).split())[:160]
    name = pgsched_statement(query)
    return f"{name}: {text}" if name else text


def _words(text: str) -> list[str]:
    lines = [ln for ln in text.splitlines() if not ln.strip().startswith("--")]
    return re.findall(r"[A-Za-z_]{2,}", " ".join(lines))[:60]


def pgsched_statement(query: str) -> str | None:
    """The name in sql/queries.sql of the statement ``query`` (as pg_stat_statements shows
    it), by the longest run of leading words in common."""
    try:
        from pgsched._store import _query_texts
    except ImportError:
        return None
    words = _words(query)
    best, best_len = None, 0
    for name, text in _query_texts().items():
        mine = _words(text.replace("{schema}", "pgsched"))
        common_len = 0
        for a, b in zip(words, mine, strict=False):
            if a.lower() != b.lower():
                break
            common_len += 1
        if common_len > best_len:
            best, best_len = name, common_len
    return best if best_len >= 8 or (best_len >= 3 and best_len == len(words)) else None


def plans_between(base: datetime, now: datetime, every_s: int) -> list[datetime]:
    """Cadence plans in ``(base, now]``."""
    out, p = [], base + timedelta(seconds=every_s)
    while p <= now:
        out.append(p)
        p += timedelta(seconds=every_s)
    return out


def raw_rates(counters: list[dict[str, Any]]) -> dict[str, Any]:
    extras = [c.get("extra", {}) for c in counters]
    rows = sum(e.get("claimed", 0) for e in extras)
    busiest = max((e.get("claim_s", 0) + e.get("finish_s", 0) for e in extras), default=0)
    return {"claim_finish_rows_per_s": round(rows / busiest) if busiest else None}


def _round(value: Any) -> float | None:
    return None if value is None else round(float(value), 3)


# -- the benchmark ------------------------------------------------------------------------


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    workloads = [WORKLOADS[k] for k in args.workloads.split(",")]
    overrides = {
        k: v
        for k, v in (
            ("scopes", args.scopes),
            ("every_s", args.every),
            ("periods", args.periods),
            ("window_s", args.window),
        )
        if v is not None
    }
    workloads = [replace(w, **overrides) for w in workloads]
    schedulers = [s for s in args.schedulers.split(",") if s]
    opts = Options(
        replicas=args.replicas,
        concurrency=args.concurrency,
        warmup_s=args.warmup,
        keep_databases=args.keep_databases,
    )
    peers_py, peers_why = (None, "")
    if any(s in PEERS for s in schedulers):
        peers_py, peers_why = peers_python(install=not args.no_install)
    server = pg.external(args.dsn) if args.dsn else pg.start_private()
    log(f"PostgreSQL {server.version}: {server.description}; pg_stat_statements={server.has_pgss}")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    results_dir = Path(args.results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    run_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="pgsched-bench-"))
    report: dict[str, Any] = {
        "started": datetime.now(UTC).isoformat(),
        "command": " ".join(["python -m bench", *sys.argv[1:]]),
        "machine": machine(),
        "postgres": {
            "version": server.version,
            "where": "private" if not args.dsn else "given by --dsn",
            "pg_stat_statements": server.has_pgss,
        },
        "options": asdict(opts),
        "workloads": {w.key: asdict(w) for w in workloads},
        "loadavg_start": loadavg(),
        "results": [],
    }
    try:
        for wl in workloads:
            for sched in schedulers:
                res = run_one(server, wl, sched, opts, peers_py, peers_why, run_dir)
                report["results"].append(res)
                log(summary_line(res))
                (results_dir / "latest.json").write_text(json.dumps(report, indent=1))
    finally:
        server.stop()
    for wl in workloads:
        limit = next(
            (r for r in report["results"] if r["workload"] == wl.key and r["scheduler"] == "raw"),
            None,
        )
        for r in report["results"]:
            if r["workload"] != wl.key or not limit or r.get("status") != "ok":
                continue
            if limit.get("plans_per_s") and "plans_per_s" in r:
                r["ratio_to_limit"] = round(r["plans_per_s"] / limit["plans_per_s"], 3)
    report["finished"] = datetime.now(UTC).isoformat()
    report["loadavg_end"] = loadavg()
    text = json.dumps(report, indent=1)
    (results_dir / "latest.json").write_text(text)
    (results_dir / f"results-{stamp}.json").write_text(text)
    if not args.keep_work and not args.work_dir:
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)
    return report


def run_one(
    server: pg.Server,
    wl: Workload,
    sched: str,
    opts: Options,
    peers_py: str | None,
    peers_why: str,
    run_dir: Path,
) -> dict[str, Any]:
    base = {"workload": wl.key, "scheduler": sched}
    if sched in PEERS:
        if not wl.peers:
            return {**base, "status": "not run", "reason": f"{sched} {wl.why_no_peers}"}
        if peers_py is None:
            return {**base, "status": "not run", "reason": peers_why}
    python = peers_py if sched in PEERS else sys.executable
    assert python is not None
    log(f"workload {wl.key} ({wl.title}): {sched}, load {loadavg()}")
    run = Run(server, wl, sched, opts, python, run_dir)
    try:
        return run.execute()
    except Exception as exc:
        return {**base, "status": "not run", "reason": f"{type(exc).__name__}: {exc}"[:400]}
    finally:
        run.close()


def summary_line(r: dict[str, Any]) -> str:
    if r.get("status") != "ok":
        return f"  {r['workload']}/{r['scheduler']}: {r.get('status')} {r.get('reason', '')}"
    return (
        f"  {r['workload']}/{r['scheduler']}: due {r['due']} completed {r['completed']} "
        f"({r['completion_pct']}%) dups {r['duplicates']} lag p50/p99/max "
        f"{r['lag_p50_s']}/{r['lag_p99_s']}/{r['lag_max_s']} s {r['plans_per_s']} plans/s "
        f"(peak {r['peak_per_s']}/s) "
        f"stmts/tick {r.get('statements_per_tick')} db ms/tick {r.get('db_ms_per_tick')} "
        f"cpu {r['cpu_s']} rss {r['peak_rss_mb']}"
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="default: a,b,c,d,e,f")
    p.add_argument("--schedulers", default=",".join(SCHEDULERS), help="default: all")
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=2000, help="handler slots per replica")
    p.add_argument("--warmup", type=float, default=8.0, help="seconds before measuring")
    p.add_argument("--scopes", type=int, help="override every workload's scope count")
    p.add_argument("--every", type=int, help="override every workload's cadence (s)")
    p.add_argument("--periods", type=int, help="override the periods measured")
    p.add_argument("--window", type=int, help="override the idle / catch-up window (s)")
    p.add_argument("--dsn", help="use this server instead of starting a private one")
    p.add_argument("--results-dir", default=str(RESULTS))
    p.add_argument("--work-dir", help="replica logs and counters (default: a temp dir)")
    p.add_argument("--keep-work", action="store_true", help="keep replica logs")
    p.add_argument("--keep-databases", action="store_true")
    p.add_argument("--no-install", action="store_true", help="never create the peers' venv")
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/performance.*")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    report = run_benchmark(args)
    if not args.no_docs:
        from bench import report as report_mod

        report_mod.write_docs(
            report, peers_python(install=False)[0], Path(args.results_dir) / "latest.json"
        )
    return 0
