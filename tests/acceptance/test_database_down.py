"""A database that is down or unreachable, through real ``pgsched`` subprocesses: every
command fails with one ``pgsched: error:`` line naming the host (never the password), and
``pgsched run`` waits for the database (one log line per attempt, /readyz 503) and starts
work as soon as it answers. SIGTERM while ``run`` is still starting exits 0."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.support.net import free_port
from tests.support.postgres import PrivateServer
from tests.support.replica import Replica, clean_env
from tests.support.waiting import wait_until

PASSWORD = "s3cret-Pw"
APP = textwrap.dedent(
    """
    import pgsched

    scheduler = pgsched.Scheduler(tick_interval="0.5s")

    @scheduler.job(every="1s")
    def beat(run):
        return 1
    """
)


def _down_dsn() -> str:
    """A DSN of a port nothing listens on, with a password that must never be printed."""
    return f"postgresql://postgres:{PASSWORD}@127.0.0.1:{free_port()}/postgres"


def _pgsched(*args: str, dsn: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgsched", *args],
        cwd=cwd,
        env=clean_env({"PGSCHED_DSN": dsn}),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def stopped_server() -> Iterator[PrivateServer]:
    """A private PostgreSQL, migrated, then stopped (the test starts it again)."""
    with PrivateServer.create() as server:
        subprocess.run(
            [sys.executable, "-m", "pgsched", "--dsn", server.dsn(), "migrate"],
            check=True,
            capture_output=True,
            text=True,
        )
        server.stop()
        yield server


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["runs"],
        ["migrate"],
        ["trigger", "beat"],
        ["pause", "beat"],
        ["prune", "--older-than", "30d"],
        ["schedules", "list", "beat"],
        ["backfill", "app.py", "beat", "--from", "2026-01-01", "--to", "2026-01-02"],
    ],
)
def test_a_command_on_a_database_that_is_down_fails_with_one_line(
    command: list[str], tmp_path: Path
) -> None:
    (tmp_path / "app.py").write_text(APP)
    dsn = _down_dsn()
    port = dsn.rsplit(":", 1)[1].split("/")[0]
    result = _pgsched(*command, dsn=dsn, cwd=tmp_path)
    assert result.returncode == 1, result
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"pgsched: error: database error on 127.0.0.1:{port}: "), lines
    assert "Traceback" not in result.stderr and PASSWORD not in result.stderr + result.stdout


def _is_json_lines(text: str) -> bool:
    return all(line.startswith("{") and json.loads(line) for line in text.splitlines())


def test_run_waits_for_a_stopped_database_and_starts_when_it_answers(
    stopped_server: PrivateServer, tmp_path: Path
) -> None:
    (tmp_path / "app.py").write_text(APP)
    env = clean_env({"PGSCHED_DSN": stopped_server.dsn()})
    replica = Replica.run("app.py", "waiter", cwd=tmp_path, env=env)
    try:
        replica.http_port()
        wait_until(
            lambda: replica.check_alive() and len(replica.events("database_unavailable")) >= 2,
            30,
            "two failed attempts logged",
        )
        ready = replica.get("/readyz")
        assert ready.status == 503 and "database unavailable" in ready.json()["reason"]
        assert not replica.events("scheduler_started")  # no work before the database answers
        attempts = [e["attempt"] for e in replica.events("database_unavailable")]
        assert attempts == list(range(1, len(attempts) + 1))  # one line per attempt
        stopped_server.start()
        replica.wait_event("database_available", 30)
        replica.wait_event("scheduler_started", 30)
        with psycopg.connect(stopped_server.dsn(), autocommit=True) as conn:
            query = sql.SQL("SELECT count(*) FROM pgsched.cron_executions WHERE status = 'SUCCESS'")
            wait_until(
                lambda: conn.execute(query).fetchone() != (0,), 30, "a SUCCESS once it answers"
            )
        assert replica.get("/readyz").status == 200
        assert replica.stop() == 0
        output = replica.output()
        assert "Traceback" not in output and "psycopg.pool" not in output
        assert _is_json_lines(output), output  # one line per event, none multi-line
    finally:
        replica.kill()


def test_sigterm_while_connecting_exits_0(tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    replica = Replica.run(
        "app.py", "doomed", cwd=tmp_path, env=clean_env({"PGSCHED_DSN": _down_dsn()})
    )
    try:
        replica.wait_event("database_unavailable", 30)
        assert replica.stop() == 0
        assert PASSWORD not in replica.output()
    finally:
        replica.kill()


SLOW_IMPORT = textwrap.dedent(
    """
    import pathlib, time
    import pgsched

    pathlib.Path("importing").touch()
    deadline = time.monotonic() + 60
    while not pathlib.Path("go").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # an APP whose import takes long (a slow module, a warm-up)

    scheduler = pgsched.Scheduler()

    @scheduler.job(every="1s")
    def beat(run):
        return 1
    """
)


def test_sigterm_while_importing_the_app_exits_0(tmp_path: Path) -> None:
    (tmp_path / "slow.py").write_text(SLOW_IMPORT)
    env = clean_env({"PGSCHED_DSN": _down_dsn()})
    replica = Replica.run("slow.py", "early", cwd=tmp_path, env=env)
    try:
        wait_until(
            lambda: replica.check_alive() and (tmp_path / "importing").exists(),
            30,
            "the APP's import to begin",
        )
        replica.signal(signal.SIGTERM)
        assert replica.stop(30) == 0, replica.output()
        assert "Traceback" not in replica.output()
    finally:
        replica.kill()


def _server_processes(server: PrivateServer) -> list[int]:
    """The postmaster of ``server`` and its children (the backends, the checkpointer...)."""
    postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == postmaster:
                children.append(int(stat.parent.name))
    return [postmaster, *children]


def test_readyz_answers_at_once_while_the_database_does_not_answer(
    stopped_server: PrivateServer, tmp_path: Path
) -> None:
    """A database whose every process is suspended (connections open, no answer: a host cut
    off mid-way): /readyz answers without waiting out its 5 s bound, first with the last
    check's result, then the 503 that check ends with."""
    (tmp_path / "app.py").write_text(APP)
    stopped_server.start()
    env = clean_env({"PGSCHED_DSN": stopped_server.dsn()})
    replica = Replica.run("app.py", "frozen", cwd=tmp_path, env=env)
    frozen: list[int] = []
    try:
        replica.http_port()
        wait_until(lambda: replica.get("/readyz").status == 200, 30, "/readyz 200")
        frozen = _server_processes(stopped_server)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        answers: list[tuple[int, float]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not answers or answers[-1][0] != 503):
            started = time.monotonic()
            status = replica.get("/readyz").status
            answers.append((status, time.monotonic() - started))
        statuses = [status for status, _ in answers]
        assert statuses[0] == 200 and statuses[-1] == 503, answers  # the last result, then
        # The bound it replaces was 5 s: this guards against waiting it out again.
        assert max(took for _, took in answers) < 3, answers
    finally:
        for pid in frozen:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        replica.kill()
