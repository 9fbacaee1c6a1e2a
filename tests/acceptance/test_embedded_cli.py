"""The README's first command (``pgsched run`` with no DSN starts an embedded PostgreSQL)
followed by the operator commands in a second terminal, and a second ``pgsched run`` on the
same HTTP port."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.net import free_port
from tests.support.replica import Replica

APP = textwrap.dedent(
    """
    import pgsched
    scheduler = pgsched.Scheduler(tick_interval="0.5s")
    @scheduler.job(every="1s")
    def ping(run):
        return 1
    """
)


@pytest.fixture
def data_home() -> Iterator[Path]:
    """An XDG_DATA_HOME outside pytest's temporary directories (as root the embedded cluster
    runs as another account, which must reach it)."""
    with tempfile.TemporaryDirectory(prefix="pgsched-data-", ignore_cleanup_errors=True) as tmp:
        Path(tmp).chmod(0o755)
        yield Path(tmp)


def _env(data_home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PGSCHED_DSN", "DATABASE_URL")}
    env["XDG_DATA_HOME"] = str(data_home)
    return env


def _pgsched(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgsched", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=90,
    )


def test_status_without_dsn_says_nothing_is_configured_when_no_embedded_server_runs(
    tmp_path: Path, data_home: Path
) -> None:
    result = _pgsched("status", env=_env(data_home), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "no database configured" in result.stderr
    assert str(data_home / "pgsched" / "postgres") in result.stderr


def test_operator_commands_find_the_embedded_server_and_a_second_run_names_the_port(
    tmp_path: Path, data_home: Path
) -> None:
    (tmp_path / "jobs.py").write_text(APP)
    env, port = _env(data_home), free_port()
    first = Replica(["run", "jobs.py", "--http-port", str(port)], cwd=tmp_path, env=env)
    try:
        first.wait_event("run_succeeded", 90)
        dsn = first.wait_event("database_dsn")["dsn"]  # password-free, for other tools
        assert "***" not in dsn and "@/postgres?host=" in dsn
        assert str(data_home / "pgsched" / "postgres") in dsn

        status = _pgsched("status", env=env, cwd=tmp_path)  # the second terminal
        assert status.returncode == 0, status.stderr
        assert "ping" in status.stdout and "SUCCESS" in status.stdout

        runs = _pgsched("--dsn", dsn, "runs", "--job", "ping", env=env, cwd=tmp_path)
        assert runs.returncode == 0 and "ping" in runs.stdout, runs.stderr  # the printed DSN

        second = _pgsched("run", "jobs.py", "--http-port", str(port), env=env, cwd=tmp_path)
        assert second.returncode == 1
        errors = [line for line in second.stderr.splitlines() if "error" in line]
        assert errors == [
            f"pgsched: error: HTTP port {port} on 127.0.0.1 is already in use (another pgsched"
            " run?): choose another with --http-port (0 picks a free one) or serve none with"
            " --no-http"
        ], second.stderr
        assert "Traceback" not in second.stderr
        assert first.check_alive()
        assert first.stop(30) == 0
    finally:
        first.kill()
