"""One trial of the HA beat workload: one configuration's beats publishing the same entries
to a queue of their own on Redis, a consumer reading every message, one beat SIGKILLed in
the middle of the window where there is more than one.

The beats are real ``celery -A bench.peers.beat_app beat`` processes (bench/peers/beat_app.py);
the consumer, on a thread of the bench's process, pops each message from the queue's Redis list
and only stamps its arrival (it runs no task), so it is not what limits a beat.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import redis
from kombu.connection import Connection
from kombu.entity import Exchange, Queue
from psycopg import sql

import pgsched
from bench import REPO, measure, pg
from bench.beat_figures import Window, figures
from bench.processes import Processes
from bench.registry import BeatConfig

SCHEMA = "pgsched"
# pgsched's own account of the window, beside the consumer's: its rows of the window's plans
# by status, and the plans its claims skipped (spans starting in the window) by reason.
LEDGER_ROWS = """SELECT status, count(*) FROM {}.cron_executions
WHERE plan_time >= to_timestamp(%(start)s) AND plan_time < to_timestamp(%(end)s)
GROUP BY status"""
LEDGER_SKIPS = """SELECT reason, sum(plans) FROM {}.cron_skips
WHERE first_plan >= to_timestamp(%(start)s) AND first_plan < to_timestamp(%(end)s)
GROUP BY reason"""


@dataclass(frozen=True)
class Shape:
    """The workload: entries and cadence, the measured window and the kill inside it."""

    entries: int = 200
    every_s: int = 5
    window_s: float = 60.0
    kill_at_s: float = 30.0  # from the window's start
    warmup_s: float = 5.0  # after every beat's first message
    drain_s: float = 5.0  # after the window, for its last plans' messages
    redbeat_max_loop_s: float = 5.0  # redbeat's lock timeout is 5 x this (its default rule)

    def entry_names(self) -> list[str]:
        return [f"e{i:03d}" for i in range(self.entries)]


class Consumer:
    """Reads every message of ``queue`` on a thread: each one's arrival time, entry, task id
    and headers, in arrival order (``arrivals``). kombu declares the queue (so the beats'
    sends are routed to it); the messages are then popped from its Redis list and parsed
    here, at a small part of a kombu consumer's cost a message: the consumer shares the
    machine's two cores with the beats it measures."""

    def __init__(self, broker: str, queue: str) -> None:
        self.arrivals: list[dict[str, Any]] = []
        self._broker, self._queue = broker, queue
        self._ready, self._stop = threading.Event(), threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="beat-consumer", daemon=True)

    def start(self) -> None:
        with Connection(self._broker) as conn:
            Queue(self._queue, Exchange(self._queue, "direct"), routing_key=self._queue)(
                conn.default_channel
            ).declare()
        self._thread.start()
        if not self._ready.wait(15):
            raise RuntimeError(f"the consumer did not start: {self._error}")

    def _main(self) -> None:
        try:
            client = redis.Redis.from_url(self._broker)
            client.ping()
            self._ready.set()
            while not self._stop.is_set():
                popped = client.brpop([self._queue], timeout=0.5)
                if popped is not None:
                    self._on_message(time.time(), popped[1])
        except BaseException as exc:  # reported by stop()
            self._error = exc

    def _on_message(self, arrived: float, raw: bytes | str) -> None:
        message = json.loads(raw)
        headers = message.get("headers") or {}
        body = message.get("body") or ""
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        args = json.loads(body)[0] if body else []
        self.arrivals.append(
            {
                "t": arrived,
                "entry": args[0] if args else None,
                "task_id": headers.get("id"),
                "origin": headers.get("origin"),
                "plan_time": headers.get("pgsched_plan_time"),
                "execution_id": headers.get("pgsched_execution_id"),
            }
        )

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        if self._error is not None:
            raise RuntimeError(f"the consumer failed: {self._error!r}")


class BeatTrial:
    """One configuration in one round: its database (pgsched), its queue and redbeat keys on
    Redis, its beats and the consumer; ``execute()`` returns the trial's figures."""

    def __init__(
        self,
        config: BeatConfig,
        shape: Shape,
        python: str,
        server: pg.Server | None,
        broker: str,
        run_dir: Path,
    ) -> None:
        self.config, self.shape, self.python, self.broker = config, shape, python, broker
        token = secrets.token_hex(4)
        self.name = f"bench-beat-{config.key}-{token}"
        self.db = f"bench_beat_{config.key}_{token}"
        self.server, self.dsn = server, server.dsn(self.db) if server else ""
        self.run_dir = run_dir / self.name
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.consumer = Consumer(broker, self.name)
        # 5 s after SIGTERM, then SIGKILL: the measurement is over by then, and a pgsched
        # beat's graceful stop can take 10 s.
        self.beats = Processes(
            "beat", config.beats, self.beat_command, self.beat_env, self.run_dir, grace_s=5
        )
        self.db_created = False

    def beat_env(self, i: int) -> dict[str, str]:
        settings = {
            "kind": self.config.kind,
            "broker": self.broker,
            "queue": self.name,
            "entries": self.shape.entries,
            "every_s": self.shape.every_s,
            "dsn": self.dsn,
            "schema": SCHEMA,
            "redis_url": self.broker,
            "key_prefix": self.name,
            "max_loop_s": self.shape.redbeat_max_loop_s,
        }
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        return dict(
            os.environ,
            BENCH_BEAT=json.dumps(settings),
            PYTHONPATH=path,
            PGSCHED_LOG_LEVEL="warning",
        )

    def setup(self) -> None:
        if self.config.kind != "pgsched" or self.server is None:
            return
        with psycopg.connect(self.server.admin_dsn, autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(self.db)))
        self.db_created = True
        pgsched.Admin(self.dsn, SCHEMA).migrate()

    def beat_command(self, i: int) -> list[str]:
        schedule = self.run_dir / f"beat-{i}.schedule"
        command = [self.python, "-m", "celery", "-A", "bench.peers.beat_app", "beat"]
        return [*command, *self.config.scheduler_args(schedule), "-l", "WARNING"]

    def senders(self) -> set[str]:
        return {a["origin"] for a in self.consumer.arrivals}

    def wait_for_beats(self, deadline_s: float = 120.0) -> None:
        """Until every beat that sends has sent (redbeat: one, its lock holder)."""
        wanted = 1 if self.config.kind == "redbeat" else self.config.beats
        deadline = time.monotonic() + deadline_s
        while len(self.senders()) < wanted:
            crashed = self.beats.crashed()
            if crashed:
                log = self.beats.log_path(crashed[0]).read_text(errors="replace")
                raise RuntimeError(f"beat {crashed[0]} exited: {log.strip()[-400:]}")
            if time.monotonic() > deadline:
                sent = len(self.senders())
                raise RuntimeError(f"{sent} of {wanted} beats sent in {deadline_s:g} s")
            time.sleep(0.2)

    def beat_of(self, origin: str | None) -> int:
        """The index of the beat that sent a message with ``origin`` (``gen<pid>@host``)."""
        for i, p in enumerate(self.beats.procs):
            if origin and origin.startswith(f"gen{p.pid}@"):
                return i
        return 0

    def kill(self) -> dict[str, Any]:
        """SIGKILL the beat that sent the latest message (redbeat: the lock holder)."""
        last = self.consumer.arrivals[-1]["origin"] if self.consumer.arrivals else None
        victim = self.beat_of(last)
        self.beats.kill(victim)
        return {"killed_beat": victim, "killed_origin": last, "killed_at": time.time()}

    def execute(self) -> dict[str, Any]:
        self.setup()
        self.consumer.start()
        self.beats.start()
        self.wait_for_beats()
        shape = self.shape
        start = math.ceil((time.time() + shape.warmup_s) / shape.every_s) * shape.every_s
        cpu0 = self.beats.cpu_s()
        load = measure.loadavg()
        killed: dict[str, Any] = {"killed_beat": None, "killed_origin": None}
        if self.config.beats > 1:
            sleep_until(start + shape.kill_at_s)
            killed = self.kill()
        sleep_until(start + shape.window_s + shape.drain_s)
        cpu = [_used(now, then) for now, then in zip(self.beats.cpu_s(), cpu0, strict=True)]
        exits = self.beats.stop()
        self.consumer.stop()
        kill_t = killed.get("killed_at")
        names = shape.entry_names()
        w = Window(self.config.kind, names, shape.every_s, start, shape.window_s, kill_t)
        self.write_arrivals()
        return {
            "status": "ok",
            **figures(self.consumer.arrivals, w),
            **{k: v for k, v in killed.items() if k != "killed_at"},
            "kill_after_s": None if kill_t is None else round(kill_t - start, 3),
            "window_start": start,
            "beat_cpu_s": cpu,
            "beat_exits": exits,
            "loadavg": load,
            **self.ledger(start),
        }

    def ledger(self, start: float) -> dict[str, Any]:
        """pgsched's rows and skipped plans of the window (nothing for the other beats)."""
        if not self.db_created:
            return {}
        window = {"start": start, "end": start + self.shape.window_s}
        schema = sql.Identifier(SCHEMA)
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute(sql.SQL(LEDGER_ROWS).format(schema), window).fetchall()
            skips = conn.execute(sql.SQL(LEDGER_SKIPS).format(schema), window).fetchall()
        return {
            "ledger_rows": {str(k): int(n) for k, n in rows},
            "ledger_skipped": {str(k): int(n) for k, n in skips},
        }

    def write_arrivals(self) -> None:
        with open(self.run_dir / "arrivals.jsonl", "w", encoding="utf-8") as out:
            for a in self.consumer.arrivals:
                out.write(json.dumps(a) + "\n")

    def close(self) -> None:
        """Stop what is left; drop the database and the trial's keys on Redis."""
        self.beats.stop()
        with contextlib.suppress(Exception):
            self.consumer.stop()
        with contextlib.suppress(Exception):
            client = redis.Redis.from_url(self.broker)
            keys = list(client.scan_iter(match=f"{self.name}*"))
            keys += list(client.scan_iter(match=f"_kombu.binding.{self.name}*"))
            if keys:
                client.delete(*keys)
        if self.db_created and self.server is not None:
            with psycopg.connect(self.server.admin_dsn, autocommit=True) as admin:
                drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
                admin.execute(drop.format(sql.Identifier(self.db)))


def sleep_until(t: float) -> None:
    while (left := t - time.time()) > 0:
        time.sleep(min(left, 0.5))


def _used(now: float | None, then: float | None) -> float | None:
    return None if now is None or then is None else round(now - then, 2)
