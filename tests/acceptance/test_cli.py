"""The command line as a user meets it: one-line errors, check, migrate, embedded run."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from tests.support.replica import Replica
from tests.support.rows import count
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

REPO = Path(__file__).resolve().parents[2]


def pgsched(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("PGSCHED_DSN", "DATABASE_URL")}
    return subprocess.run(
        [sys.executable, "-m", "pgsched", *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("pgsched: error: ")
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_check_lists_jobs_with_next_plan_times() -> None:
    result = pgsched("check", "examples/jobs.py", cwd=REPO)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    for job in ("heartbeat_report", "tenant_sync", "every_minute_berlin"):
        assert job in out
    assert "every 10s" in out and "Europe/Berlin" in out
    assert "3 job(s) OK" in out


@pytest.mark.parametrize(
    ("app", "needles"),
    [
        ("missing.py", ("missing.py", "does not exist")),
        ("no_such_module_xyz", ("no_such_module_xyz", "ModuleNotFoundError")),
        ("os", ("has no attribute 'scheduler'",)),
        ("os:path", ("not a pgsched.Scheduler",)),
    ],
)
def test_bad_app_gives_one_line(app: str, needles: tuple[str, ...], tmp_path: Path) -> None:
    assert_one_line_error(pgsched("check", app, cwd=tmp_path), *needles)
    assert_one_line_error(pgsched("run", app, cwd=tmp_path), *needles)


def test_invalid_job_option_names_job_field_and_value(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text(
        textwrap.dedent(
            """
            import pgsched
            scheduler = pgsched.Scheduler()
            @scheduler.job(every="5 parsecs")
            def report(run): ...
            """
        )
    )
    assert_one_line_error(pgsched("check", "bad.py", cwd=tmp_path), "report", "every", "5 parsecs")


def test_an_option_of_another_scheduler_is_one_line_naming_job_option_and_hint(
    tmp_path: Path,
) -> None:
    (tmp_path / "peer.py").write_text(
        textwrap.dedent(
            """
            import pgsched
            scheduler = pgsched.Scheduler()
            @scheduler.job(every="5m", retries=3)
            def rollup(run): ...
            """
        )
    )
    result = pgsched("check", "peer.py", cwd=tmp_path)
    assert_one_line_error(result, "job 'rollup'", "unknown option 'retries'", "'max_attempts'")
    assert "TypeError" not in result.stderr and "cannot import" not in result.stderr


def test_check_prints_what_happens_to_each_job_after_a_crash(tmp_path: Path) -> None:
    (tmp_path / "crash.py").write_text(
        textwrap.dedent(
            """
            import pgsched
            scheduler = pgsched.Scheduler()
            @scheduler.job(every="5m", transactional=True)
            def tx(run): ...
            @scheduler.job(every="5m", max_attempts=3)
            def plain(run): ...
            @scheduler.job(every="5m", allow_stale_reentry=True)
            def stealable(run): ...
            @scheduler.job(every="5m", transactional=True, allow_stale_reentry=False)
            def careful(run): ...
            """
        )
    )
    result = pgsched("check", "crash.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    failed = "after a crash: FAILED stale_timeout, not run again (allow_stale_reentry=False)"
    for expected in (
        "tx: after a crash: run again, up to attempt 2 (transactional)",
        f"plain: {failed}",
        "stealable: after a crash: run again, up to attempt 2 (allow_stale_reentry=True)",
        f"careful: {failed}",
    ):
        assert expected in lines, result.stdout
    assert "4 job(s) OK" in lines


def test_syntax_error_in_app_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text("def oops(:\n")
    assert_one_line_error(pgsched("check", "broken.py", cwd=tmp_path), "SyntaxError", "line 1")


def test_unreachable_database_hides_password(tmp_path: Path) -> None:
    dsn = "postgresql://app:hunter2secret@127.0.0.1:1/nowhere"
    for args in (("--dsn", dsn, "migrate"), ("migrate",)):
        result = pgsched(*args, cwd=tmp_path, env={"PGSCHED_DSN": dsn})
        assert_one_line_error(result, "database error")
        assert "hunter2secret" not in result.stderr + result.stdout


def test_migrate_without_dsn_is_refused(tmp_path: Path) -> None:
    assert_one_line_error(pgsched("migrate", cwd=tmp_path), "no database configured")


def test_migrate_is_idempotent(pg_dsn: str, schema: str) -> None:
    first = pgsched("--dsn", pg_dsn, "--schema", schema, "migrate")
    assert first.returncode == 0, first.stderr
    assert "applied 0001" in first.stdout
    second = pgsched("--dsn", pg_dsn, "--schema", schema, "migrate")
    assert second.returncode == 0 and "up to date" in second.stdout


@pytest.fixture
def data_home() -> Iterator[Path]:
    """An XDG_DATA_HOME outside pytest's temporary directories: as root the embedded cluster
    runs as another account, which must reach its directory, and every pytest session that
    starts on the machine makes /tmp/pytest-of-<user> private again."""
    with tempfile.TemporaryDirectory(prefix="pgsched-data-", ignore_cleanup_errors=True) as tmp:
        yield Path(tmp)


def test_run_without_dsn_starts_embedded_postgres(tmp_path: Path, data_home: Path) -> None:
    (tmp_path / "jobs.py").write_text(
        textwrap.dedent(
            """
            import pgsched
            scheduler = pgsched.Scheduler(tick_interval="0.5s")
            @scheduler.job(every="1s")
            def ping(run):
                return 1
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PGSCHED_DSN", "DATABASE_URL")}
    env["XDG_DATA_HOME"] = str(data_home)  # keep the embedded cluster inside the test
    replica = Replica(["run", "jobs.py", "--http-port", "0"], cwd=tmp_path, env=env)
    try:
        replica.wait_event("run_succeeded", 90)
        assert replica.stop(30) == 0
    finally:
        replica.kill()
    text = replica.output()
    assert "started an embedded PostgreSQL" in text
    data_dir = data_home / "pgsched" / "postgres"
    assert str(data_dir) in text
    assert (data_dir / "PG_VERSION").exists()
    assert "applied migrations 0001" in text


def test_run_with_dsn_never_starts_embedded(pg_dsn: str, schema: str, tmp_path: Path) -> None:
    (tmp_path / "jobs.py").write_text(
        "import pgsched\nscheduler = pgsched.Scheduler()\n"
        "@scheduler.job(every='1h')\ndef ping(run):\n    return 1\n"
    )
    env = {"PGSCHED_DSN": pg_dsn, "XDG_DATA_HOME": str(tmp_path / "data")}
    pgsched("--schema", schema, "migrate", env=env)
    replica = Replica(
        ["--schema", schema, "run", "jobs.py", "--http-port", "0"],
        cwd=tmp_path,
        env={**os.environ, **env},
    )
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        wait_until(
            lambda: count(conn, schema, "status = 'SUCCESS'"),
            30,
            "the run on the configured database",
        )
    assert replica.stop(30) == 0
    assert "embedded" not in replica.output()
    assert not (tmp_path / "data").exists()


# -- logs a person can read (the README's logs paragraph) ---------------------------------------

TTY_APP = textwrap.dedent(
    """
    import pgsched
    scheduler = pgsched.Scheduler(tick_interval="0.5s")
    @scheduler.job(every="1s")
    def ping(run):
        return 1
    """
)


def _run_on_a_terminal(pg_dsn: str, schema: str, tmp_path: Path, **env: str) -> str:
    """``pgsched run`` with its stderr on a pseudo-terminal, stopped with SIGTERM once a run
    succeeded; returns what it wrote there."""
    import pty
    import select

    (tmp_path / "jobs.py").write_text(TTY_APP)
    pgsched("--dsn", pg_dsn, "--schema", schema, "migrate")
    master, slave = pty.openpty()
    base = {k: v for k, v in os.environ.items() if k not in ("PGSCHED_LOG_FORMAT", "DATABASE_URL")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgsched", "run", "jobs.py", "--http-port", "0"],
        cwd=tmp_path,
        env={**base, "PGSCHED_DSN": pg_dsn, "PGSCHED_SCHEMA": schema, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=slave,
    )
    os.close(slave)
    seen = bytearray()

    def succeeded() -> bool:
        if select.select([master], [], [], 0.2)[0]:
            with contextlib.suppress(OSError):  # EIO: the process exited, closing the pty
                seen.extend(os.read(master, 65536))
        return b"run_succeeded" in seen

    try:
        wait_until(succeeded, 60, "a run logged on the terminal", interval=0)
        proc.send_signal(signal.SIGTERM)
        # Keep reading: a replica whose terminal went away would fail writing its last lines.
        wait_until(
            lambda: succeeded() and proc.poll() is not None, 30, "the replica to exit", interval=0
        )
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert proc.wait() == 0
    return seen.decode(errors="replace")


def test_a_terminal_gets_coloured_console_lines_and_the_status_page_address(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    coloured = _run_on_a_terminal(pg_dsn, schema, tmp_path)
    assert "\x1b[" in coloured  # colours, since stderr is a terminal
    text = re.sub(r"\x1b\[[0-9;]*m", "", coloured)
    lines = [line for line in text.splitlines() if line.strip()]
    assert not any(line.lstrip().startswith("{") for line in lines), text
    listening = [line for line in lines if "http_listening" in line]
    assert len(listening) == 1, text
    assert re.search(r"status_page=http://127\.0\.0\.1:\d+/", listening[0]), listening[0]
    assert re.search(r"metrics=http://127\.0\.0\.1:\d+/metrics", listening[0]), listening[0]


def test_pgsched_log_format_json_wins_over_the_terminal(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    text = _run_on_a_terminal(pg_dsn, schema, tmp_path, PGSCHED_LOG_FORMAT="json")
    events = [json.loads(line) for line in text.splitlines() if line.strip()]
    assert {"http_listening", "run_succeeded"} <= {e["event"] for e in events}
    assert "\x1b[" not in text


def test_a_pipe_gets_json_lines_and_a_bad_log_format_is_one_line(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    (tmp_path / "jobs.py").write_text(TTY_APP)
    env = {**os.environ, "PGSCHED_DSN": pg_dsn, "PGSCHED_SCHEMA": schema}
    env.pop("PGSCHED_LOG_FORMAT", None)
    pgsched("--dsn", pg_dsn, "--schema", schema, "migrate")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pgsched", "run", "jobs.py", "--http-port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = wait_until(lambda: proc.stdout.readline(), 30, "a log line")  # type: ignore[union-attr]
        assert json.loads(first)["event"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    bad = pgsched("status", "--dsn", pg_dsn, env={"PGSCHED_LOG_FORMAT": "yaml"})
    assert_one_line_error(bad, "PGSCHED_LOG_FORMAT", "'yaml'")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_run_synchronous_claims_warns_once_without_a_synchronous_standby(
    pg_dsn: str, schema: str, tmp_path: Path, how: str
) -> None:
    """``run --synchronous-claims`` (or ``PGSCHED_SYNCHRONOUS_CLAIMS=1``) reaches the replica:
    on a server without synchronous standbys it says so once, and keeps claiming."""
    (tmp_path / "jobs.py").write_text(
        "import pgsched\nscheduler = pgsched.Scheduler(tick_interval='0.2s')\n"
        "@scheduler.job(every='1s')\ndef ping(run):\n    return 1\n"
    )
    env = {"PGSCHED_DSN": pg_dsn, "PGSCHED_LOG_FORMAT": "json"}
    pgsched("--schema", schema, "migrate", env=env)
    args = ["--schema", schema, "run", "jobs.py", "--no-http"]
    if how == "flag":
        args.append("--synchronous-claims")
    else:
        env["PGSCHED_SYNCHRONOUS_CLAIMS"] = "1"
    base = {k: v for k, v in os.environ.items() if k != "PGSCHED_SYNCHRONOUS_CLAIMS"}
    replica = Replica(args, cwd=tmp_path, env={**base, **env})
    try:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            wait_until(lambda: count(conn, schema, "status = 'SUCCESS'") >= 2, 30, "two runs")
    finally:
        code = replica.stop(30)
    assert code == 0
    events = [e["event"] for e in replica.events()]
    assert events.count("synchronous_claims_unprotected") == 1


def test_version_prints_the_installed_distribution_version() -> None:
    from importlib.metadata import version

    result = pgsched("--version", cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"pgsched {version('pgsched')}"
    assert result.stderr == ""
