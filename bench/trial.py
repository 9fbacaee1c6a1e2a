"""One trial: one compared scheduler on one workload, in a database of its own.

The trial creates the database, lets the workload's timeline (:mod:`bench.timeline`) start
its replicas and pick the measured window, then collects the window's numbers
(:mod:`bench.measure`) into one result of the JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench import REPO, measure, pg
from bench.peers import common
from bench.processes import Processes
from bench.schedulers import Contender
from bench.shared import JOB
from bench.timeline import Window, timeline
from bench.workloads import Workload


@dataclass
class Options:
    replicas: int = 3
    concurrency: int = 2000
    ledger_pool: int = 8
    warmup_s: float = 8.0
    drain_cap_s: float = 60.0
    keep_databases: bool = False
    put_cap_s: float = 600.0  # schedules as data: the longest bulk put (workload g)


class Replicas(Processes):
    """The replica processes of one trial, their logs and their counters in ``run_dir``."""

    def __init__(
        self, count: int, command: list[str], env: Callable[[int], dict[str, str]], run_dir: Path
    ) -> None:
        super().__init__("replica", count, lambda _: command, env, run_dir, grace_s=40)

    def counters(self) -> list[dict[str, Any]]:
        """What each replica last wrote to ``replica-<i>.json`` (see bench.peers.common)."""
        out = []
        for i in range(self.count):
            try:
                out.append(json.loads((self.run_dir / f"replica-{i}.json").read_text()))
            except (OSError, ValueError):
                out.append({})
        return out


class Trial:
    """One contender on one workload; the :class:`bench.timeline.Stage` its timeline drives.

    Plans are computed on the database's clock; waits use ``time.time()`` plus the offset
    measured when the trial starts.
    """

    def __init__(
        self,
        server: pg.Server,
        wl: Workload,
        contender: Contender,
        opts: Options,
        python: str,
        run_dir: Path,
    ) -> None:
        self.wl, self.contender, self.opts, self.python = wl, contender, opts, python
        self.db = f"bench_{wl.key}_{contender.key}_{secrets.token_hex(3)}"
        self.dsn = server.dsn(self.db)
        run_dir = run_dir / f"{wl.key}-{contender.key}"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.run_dir = run_dir
        self.admin = psycopg.connect(server.admin_dsn, autocommit=True)
        self.statements = measure.Statements(self.admin, self.db, server.has_pgss)
        command = contender.command(python, self.dsn)
        self.replicas = Replicas(opts.replicas, command, self.env, run_dir)
        self.clock_offset = 0.0
        self.cpu0: list[float] = []
        self.counters0: list[dict[str, Any]] = []

    # -- the clock --------------------------------------------------------------------------

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

    # -- the database and the replicas' configuration ----------------------------------------

    def setup(self) -> None:
        self.admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.db)))
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(common.LEDGER_DDL)
        self.contender.setup(self.dsn, self.python, self.env(0))

    def close(self) -> None:
        self.replicas.stop()
        if not self.opts.keep_databases:
            with contextlib.suppress(Exception):
                self.admin.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                        sql.Identifier(self.db)
                    )
                )
        self.admin.close()

    def config(self, replica: int) -> dict[str, Any]:
        """A replica's ``BENCH_CONFIG`` (fields of bench.peers.common.Config)."""
        wl = self.wl
        return {
            "dsn": self.dsn,
            "job": JOB,
            "scopes": wl.scopes,
            "every_s": wl.every_s,
            "catch_up": "every_plan" if wl.catch_up else "latest_only",
            "catch_up_window_s": wl.downtime_s + 60 if wl.catch_up else 0,
            "max_plans_per_tick": 100 if wl.catch_up else 1,
            "overlap": wl.overlap,
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

    # -- the stage the timeline drives -------------------------------------------------------

    def prepopulate(self, plan: datetime) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            self.contender.prepopulate(conn, self.wl.scopes, plan)

    def start_replicas(self) -> datetime:
        self.replicas.start()
        return self.now()

    def begin_measurement(self, from_zero: bool = False) -> None:
        """Reset the statement statistics and take the CPU and counters' baselines (zero
        for a window that starts with the replicas)."""
        self.statements.reset()
        if from_zero:
            self.cpu0, self.counters0 = [0.0] * self.opts.replicas, [{}] * self.opts.replicas
        else:
            self.cpu0 = [c or 0.0 for c in self.replicas.cpu_s()]
            self.counters0 = self.replicas.counters()

    def alive(self) -> bool:
        return self.replicas.alive()

    def completed(self, plans: list[datetime]) -> int:
        return measure.completed(self.dsn, plans)

    def settled(self) -> bool:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return self.contender.settled(conn, self.wl.scopes)

    # -- the trial ----------------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        load = measure.loadavg()
        self.setup()
        now = self.db_now()
        window = timeline(self.wl, self.opts.warmup_s, self.opts.drain_cap_s).run(self, now)
        return self.collect(window, load)

    def collect(self, window: Window, load: list[float]) -> dict[str, Any]:
        """The window's numbers; stops the replicas."""
        t1 = self.now()
        stmts, top = self.statements.totals(), self.statements.top()
        claims = self.statements.claims()
        cpu1, rss = self.replicas.cpu_s(), self.replicas.peak_rss_mb()
        counters1 = self.replicas.counters()
        crashed = self.replicas.crashed()
        self.replicas.stop()
        seconds = (t1 - window.start).total_seconds()
        result: dict[str, Any] = {
            "workload": self.wl.key,
            "scheduler": self.contender.key,
            "status": "ok" if not crashed else "crashed",
            "reason": f"replicas {crashed} exited early (see their logs)" if crashed else "",
            "replicas": self.opts.replicas,
            "scopes": self.wl.scopes,
            "every_s": self.wl.every_s,
            "window_s": round(seconds, 2),
            "loadavg_before": load,
            "loadavg_after": measure.loadavg(),
            "cpu_s": [
                None if c1 is None else round(c1 - c0, 2)
                for c0, c1 in zip(self.cpu0, cpu1, strict=True)
            ],
            "peak_rss_mb": [None if r is None else round(r, 1) for r in rss],
        }
        result.update(measure.ledger_stats(self.dsn, window.plans, window.origin, self.wl.scopes))
        result.update(
            measure.statement_stats(stmts, self.counters0, counters1, seconds, self.opts.replicas)
        )
        if self.wl.idle:
            result["settled_s"] = None if window.settled_s is None else round(window.settled_s, 1)
        result["top_statements"] = top
        result.update(claims)
        result.update(self.contender.extra_stats(counters1))
        return result
