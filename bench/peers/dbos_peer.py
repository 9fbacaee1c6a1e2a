"""The DBOS peer (pinned in bench/requirements-peers.txt): schedules as data with DBOS's
schedule API, on PostgreSQL.

Each scope is one DBOS schedule (``schedule_name`` = the scope) of one workflow; the
workflow gets the schedule's fire time and its context (the scope) and records them in the
ledger. Every replica is a launched DBOS process: its scheduler thread lists the
application's schedules every ``scheduler_polling_interval_sec`` and keeps one thread per
active schedule, which enqueues the workflow ``sched-<name>-<time>`` (its id makes a second
replica's enqueue of the same fire a no-op) on DBOS's internal queue.

``python -m bench.peers.dbos_peer setup`` creates DBOS's system tables; ``... drive ...``
runs the driver (bench.peers.dynamic) with ``DBOSClient.apply_schedules`` (create or replace,
atomically, one batch per call) and ``DBOSClient.delete_schedule``.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
from datetime import UTC, datetime
from typing import Any

import psycopg
from dbos import DBOS, DBOSClient

from bench.peers import common, dynamic

APP = "bench"
WORKFLOW = "bench_run"
POLL_S = 5.0  # scheduler_polling_interval_sec: how soon a put or delete is seen


def dbos_config(dsn: str, runner: str) -> dict[str, Any]:
    return {
        "name": APP,
        "system_database_url": dsn,
        "executor_id": runner,
        "scheduler_polling_interval_sec": POLL_S,
        "log_level": "WARNING",
        "sys_db_pool_size": 20,
    }


class Ledger:
    """The handler's INSERT from DBOS's worker threads, over ``ledger_pool`` connections."""

    def __init__(self, cfg: common.Config) -> None:
        self.cfg = cfg
        self.idle: queue.Queue[psycopg.Connection[Any]] = queue.Queue()
        for _ in range(cfg.ledger_pool):
            self.idle.put(psycopg.connect(cfg.dsn, autocommit=True, application_name="ledger"))

    def record(self, scope: str, plan_time: datetime) -> None:
        conn = self.idle.get()
        try:
            conn.execute(common.LEDGER_INSERT, (self.cfg.job, scope, plan_time, self.cfg.runner))
        finally:
            self.idle.put(conn)


def setup(dsn: str) -> None:
    DBOS(config=dbos_config(dsn, "setup"))
    DBOS.launch()
    DBOS.destroy()


def main() -> None:
    cfg = common.config()
    common.count_psycopg_statements()
    common.start_reporting(cfg)
    ledger = Ledger(cfg)
    DBOS(config=dbos_config(cfg.dsn, cfg.runner))

    @DBOS.workflow(name=WORKFLOW)
    def bench_run(scheduled_at: datetime, context: Any) -> None:
        ledger.record(context["scope"], scheduled_at.astimezone(UTC))

    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    DBOS.launch()
    stop.wait()
    DBOS.destroy()
    os._exit(0)  # its per-schedule threads would go on logging that DBOS is not launched


class DbosAdapter:
    cadences = dynamic.CHURN_CADENCES

    def __init__(self) -> None:
        self.client = DBOSClient(system_database_url=common.config().dsn, application_name=APP)

    @staticmethod
    def cron(s: dynamic.Spec) -> str:
        """DBOS reads a sixth field first as seconds: a cadence is a seconds step."""
        if s.every_s is None:
            return str(s.cron)
        return f"*/{s.every_s} * * * * *" if s.every_s < 60 else f"0 */{s.every_s // 60} * * * *"

    def put(self, specs: list[dynamic.Spec]) -> None:
        self.client.apply_schedules(
            [
                {
                    "schedule_name": s.scope,
                    "workflow_name": WORKFLOW,
                    "schedule": self.cron(s),
                    "context": {"scope": s.scope},
                    "cron_timezone": s.zone,
                }
                for s in specs
            ]
        )

    def delete(self, scope: str) -> None:
        self.client.delete_schedule(scope)


if __name__ == "__main__":
    if sys.argv[1:] == ["setup"]:
        setup(common.config().dsn)
    elif sys.argv[1:2] == ["drive"]:
        dynamic.drive(DbosAdapter, sys.argv[2:])
    else:
        main()
