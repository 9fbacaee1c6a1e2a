"""Real Celery beats and workers (``celery -A tests.support.celery_app ...`` subprocesses) on
the machine's RabbitMQ and Redis, each test on a queue (and Redis database) of its own, and a
pgsched schema of its own."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import kombu
import pytest

import pgsched
from tests.support.replica import clean_env
from tests.support.waiting import wait_until

RABBITMQ = "amqp://guest:guest@127.0.0.1:5672//"
REDIS = "redis://127.0.0.1:6379"
_ROOT = str(Path(__file__).resolve().parents[3])  # the checkout: tests.support.celery_app
# `-S pgsched` as users write it: the `celery.beat_schedulers` entry point of the installed
# package (the dotted path works too: test_beats.py starts one beat so).
SCHEDULER = "pgsched"
BEAT = ["beat", "-l", "INFO"]
WORKER = ["worker", "-l", "INFO", "-P", "solo"]
WORKER += ["--without-heartbeat", "--without-gossip", "--without-mingle"]


class CeleryProc:
    """One ``celery -A tests.support.celery_app ARGS`` subprocess, its output in a file."""

    def __init__(self, name: str, args: list[str], *, cwd: Path, env: dict[str, str]) -> None:
        self.name, self.log = name, cwd / f"{name}.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", "tests.support.celery_app", *args],
                cwd=cwd,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def check_alive(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(
                f"{self.name} exited with {self.proc.returncode}:\n{self.output()[-4000:]}"
            )
        return True

    def wait_output(self, text: str, timeout: float = 30) -> None:
        wait_until(
            lambda: self.check_alive() and text in self.output(),
            timeout,
            lambda: f"{text!r} in {self.name}'s output:\n{self.output()[-3000:]}",
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, then its exit code (SIGKILL past ``timeout``)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not stop on SIGTERM") from None

    def wait(self, timeout: float = 30) -> int:
        return self.proc.wait(timeout)


@dataclass
class CeleryRig:
    """A test's beats and worker: one broker (a database of its own on Redis), one queue,
    one record file the worker appends each task it ran to, one pgsched schema."""

    cwd: Path
    broker: str
    schema: str
    dsn: str
    queue: str = field(default_factory=lambda: f"pgsched-test-{uuid.uuid4().hex[:12]}")
    procs: list[CeleryProc] = field(default_factory=list)

    @property
    def record(self) -> Path:
        return self.cwd / "record.jsonl"

    def env(self, schedule: dict[str, Any], **extra: str) -> dict[str, str]:
        return clean_env(
            {
                "PYTHONPATH": os.pathsep.join(filter(None, [_ROOT, os.environ.get("PYTHONPATH")])),
                "PGSCHED_DSN": self.dsn,
                "PGSCHED_SCHEMA": self.schema,
                "PGSCHED_LOG_FORMAT": "json",
                "CELERY_TEST_BROKER": self.broker,
                "CELERY_TEST_QUEUE": self.queue,
                "CELERY_TEST_RECORD": str(self.record),
                "CELERY_TEST_SCHEDULE": json.dumps(schedule),
                **extra,
            }
        )

    def worker(self, name: str = "worker", env: dict[str, str] | None = None) -> CeleryProc:
        args = [*WORKER, "-Q", self.queue]
        proc = CeleryProc(name, args, cwd=self.cwd, env=env or self.env({}))
        self.procs.append(proc)
        proc.wait_output("ready.", timeout=40)
        return proc

    def migrate(self) -> None:
        """Migrate the schema before the beats start, as a deployment runs `pgsched migrate`.
        Beats that each migrate a fresh schema take turns on the migration lock, one
        transaction per migration: under load that took most of a first plan's deadline."""
        admin = pgsched.Admin(dsn=self.dsn, schema=self.schema)
        try:
            admin.migrate()
        finally:
            admin.close()

    def beat(
        self, name: str, schedule: dict[str, Any], scheduler: str = SCHEDULER, **extra: str
    ) -> CeleryProc:
        args = [*BEAT, "-S", scheduler]
        proc = CeleryProc(name, args, cwd=self.cwd, env=self.env(schedule, **extra))
        self.procs.append(proc)
        return proc

    def wait_started(self, *beats: CeleryProc, timeout: float = 90) -> None:
        """Wait for each beat's replica to start (its ``scheduler_started`` event), each with
        a deadline of its own: a process start-up under load is not what the waits for plans
        after it measure."""
        for beat in beats:
            beat.wait_output('"event": "scheduler_started"', timeout)

    def records(self) -> list[dict[str, Any]]:
        if not self.record.exists():
            return []
        lines = self.record.read_text().splitlines()
        return [json.loads(line) for line in lines if line.endswith("}")]

    def close(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(Exception):
                proc.kill()
        # The queue goes with the test (RabbitMQ keeps a durable queue; Redis a list).
        with (
            contextlib.suppress(Exception),
            cast(Any, kombu).Connection(self.broker, connect_timeout=2) as conn,  # untyped
        ):
            conn.default_channel.queue_delete(self.queue)


def redis_db(queue: str) -> int:
    return 1 + int(queue[-4:], 16) % 15  # the queue is unique anyway; fewer keys per db


@pytest.fixture(params=["amqp", "redis"])
def any_rig(
    request: pytest.FixtureRequest, tmp_path: Path, schema: str, pg_dsn: str
) -> Iterator[CeleryRig]:
    """A rig on RabbitMQ, then on Redis."""
    rig = CeleryRig(tmp_path, RABBITMQ, schema, pg_dsn)
    if request.param == "redis":
        rig.broker = f"{REDIS}/{redis_db(rig.queue)}"
    try:
        yield rig
    finally:
        rig.close()


@pytest.fixture
def redis_rig(tmp_path: Path, schema: str, pg_dsn: str) -> Iterator[CeleryRig]:
    rig = CeleryRig(tmp_path, REDIS, schema, pg_dsn)
    rig.broker = f"{REDIS}/{redis_db(rig.queue)}"
    try:
        yield rig
    finally:
        rig.close()
