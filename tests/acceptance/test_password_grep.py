"""A DSN's password never appears in any output or log (as the README says; reliability item 6).

One run with a password-bearing DSN (trust auth ignores the password): ``pgsched migrate``,
a ``pgsched run`` replica with a job that succeeds (and logs its DSN through ``run.log``) and
one that fails with an exception quoting its DSN, its HTTP pages, and every command of the
command line; then malformed and unreachable DSNs. Every stdout/stderr line, HTTP response
and stored error message is searched for the password, raw and percent-encoded.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.support.cli import CliResult, cli_in_process
from tests.support.net import http
from tests.support.replica import Replica
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

PASSWORD = "Pw-9f3Kq!x"
ENV_KEYS = ("PGSCHED_DSN", "PGSCHED_SCHEMA", "DATABASE_URL", "PGSCHED_LOG_FORMAT")
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

APP = textwrap.dedent(
    """
    import os
    import pgsched

    scheduler = pgsched.Scheduler(tick_interval="0.5s")

    @scheduler.job(every="1h")
    def fine(run):
        run.log.info("connecting", dsn=os.environ["PGSCHED_DSN"], kv=os.environ["KV_DSN"])
        return pgsched.Result(rows_affected=1, data={"ok": True})

    @scheduler.job(every="1h", max_attempts=1)
    def leaky(run):
        raise RuntimeError(
            "cannot reach " + os.environ["PGSCHED_DSN"] + " nor " + os.environ["KV_DSN"]
        )
    """
)


class Secret:
    """The password and the DSNs that carry it."""

    def __init__(self, pg_dsn: str) -> None:
        params = conninfo_to_dict(pg_dsn)
        # A test database that needs a real password keeps it; trust auth takes ours.
        self.password = str(params.get("password") or PASSWORD)
        self.host = str(params.get("host") or "127.0.0.1")
        self.port = str(params.get("port") or "5432")
        self.user = str(params.get("user") or "postgres")
        self.dbname = str(params.get("dbname") or "postgres")
        self.encoded = quote(self.password, safe="")
        self.url = self.url_with(self.encoded)
        self.kv = make_conninfo(pg_dsn, password=self.password)

    def url_with(self, password_text: str, port: str | None = None) -> str:
        return (
            f"postgresql://{self.user}:{password_text}@{self.host}:{port or self.port}/"
            f"{self.dbname}"
        )

    @property
    def needles(self) -> list[str]:
        found = {self.password, self.encoded}
        if self.password == PASSWORD:
            found.add("9f3Kq")  # any fragment of it: escaped, truncated or re-quoted forms
        return sorted(found)

    def assert_absent(self, text: str, where: str) -> None:
        for needle in self.needles:
            assert needle not in text, f"the password ({needle!r}) appears in {where}:\n{text}"


class Output:
    """Everything the test saw, labelled, so a leak says where it came from."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def add(self, where: str, text: str) -> str:
        self.seen.append((where, text))
        return text

    def cli(self, where: str, result: subprocess.CompletedProcess[str]) -> None:
        self.add(f"{where} (stdout)", result.stdout)
        self.add(f"{where} (stderr)", result.stderr)


def cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pgsched", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def http_get(url: str) -> tuple[int, str]:
    """Status, and headers and body as one text (both are grepped for the password)."""
    resp = http("GET", url)
    return resp.status, f"{resp.headers}\n{resp.text}"


@pytest.fixture
def base_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ENV_KEYS}


@pytest.fixture
def secret(pg_dsn: str) -> Secret:
    return Secret(pg_dsn)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "app.py").write_text(APP)
    return tmp_path


@pytest.fixture
def replicas() -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.kill()


def one_line_error(result: subprocess.CompletedProcess[str] | CliResult) -> None:
    assert result.returncode != 0, result.stdout
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("pgsched: error: "), result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_no_output_of_a_whole_run_contains_the_password(
    secret: Secret,
    schema: str,
    workdir: Path,
    base_env: dict[str, str],
    db: psycopg.Connection[tuple[object, ...]],
    replicas: list[Replica],
) -> None:
    seen = Output()
    env = {**base_env, "KV_DSN": secret.kv}

    def run(where: str, *args: str, dsn: str | None = secret.url, ok: bool = True) -> str:
        flags = ["--dsn", dsn] if dsn is not None else []
        result = cli(*flags, "--schema", schema, *args, cwd=workdir, env=env)
        seen.cli(where, result)
        if ok:
            assert result.returncode == 0, (args, result.stderr)
        else:
            one_line_error(result)
        return result.stdout

    run("migrate", "migrate")

    replica = Replica.run(
        "app.py",
        "grep-replica",
        cwd=workdir,
        env={**env, "PGSCHED_DSN": secret.url, "PGSCHED_SCHEMA": schema},
    )
    replicas.append(replica)
    port = replica.http_port()
    executions = sql.Identifier(schema, "cron_executions")

    def both_finished() -> bool:
        found = {
            job: status
            for job, status in db.execute(
                sql.SQL("SELECT job_name, status FROM {} WHERE status <> 'RUNNING'").format(
                    executions
                )
            ).fetchall()
        }
        return found.get("fine") == "SUCCESS" and found.get("leaky") == "FAILED"

    wait_until(both_finished, 30, "fine to succeed and leaky to fail")

    for path in ("/metrics", "/api/runs", "/api/runs?job=leaky", "/api/jobs", "/", "/readyz"):
        status, body = http_get(f"http://127.0.0.1:{port}{path}")
        assert status == 200, (path, status, body[:500])
        seen.add(f"GET {path}", body)
    assert "cannot reach" in seen.seen[-5][1]  # /api/runs?job=leaky shows the (redacted) error

    # Every command, with the URL form, the key=value form and the environment variable.
    run("check", "check", "app.py")
    run("status", "status")
    run("status --json", "status", "--json", dsn=secret.kv)
    run("runs", "runs")
    run("runs --json", "runs", "--json", dsn=secret.kv)
    leaky_runs = run("runs --job leaky", "runs", "--job", "leaky", "--json")
    assert "cannot reach postgresql://" in leaky_runs and "***" in leaky_runs  # redacted
    manual = run("trigger", "trigger", "fine").strip()
    later = (datetime.now(UTC) + timedelta(days=2)).isoformat()
    pending = run("trigger --at", "trigger", "fine", "--at", later).strip()
    run("cancel", "cancel", pending)
    run("pause", "pause", "fine")
    run("resume", "resume", "fine", dsn=secret.kv)
    start = (datetime.now(UTC) - timedelta(hours=3)).isoformat()
    end = (datetime.now(UTC) - timedelta(hours=1)).isoformat()
    run("backfill", "backfill", "app.py", "fine", "--from", start, "--to", end)
    run("prune", "prune", "--older-than", "30d")
    env["PGSCHED_DSN"] = secret.url
    run("status via PGSCHED_DSN", "status", dsn=None)
    del env["PGSCHED_DSN"]
    # error paths of a working DSN
    run("trigger unknown", "trigger", "no_such_job", ok=False)
    run("cancel done", "cancel", manual, ok=False)
    run("cancel not-a-uuid", "cancel", "not-a-uuid", ok=False)

    code, output = replica.stop(30), replica.output()
    seen.add("pgsched run (stdout+stderr)", output)
    assert code == 0, output[-3000:]
    assert '"run_failed"' in output and "cannot reach" in output  # the failure was logged
    assert '"dsn": "postgresql://' in output and "***" in output  # run.log's DSN, redacted

    stored = db.execute(sql.SQL("SELECT error_msg, result::text FROM {}").format(executions))
    seen.add("cron_executions.error_msg/result", repr(stored.fetchall()))

    assert len(seen.seen) > 40
    for where, text in seen.seen:
        secret.assert_absent(text, where)


def _malformed(secret: Secret) -> list[str]:
    return [
        secret.url_with(secret.encoded.replace("%21", "%zz") + "%zz"),  # bad percent-encoding
        secret.url_with(secret.encoded, port="notaport"),
        f"host={secret.host} port={secret.port} user={secret.user} "
        f"password='{secret.password} dbname={secret.dbname}",  # unterminated quote
        f"host={secret.host} password={secret.password} nosuchoption=1",
    ]


# Every command that connects (run: below), each with a password-bearing DSN given before the
# command, after it (the README: both work), and through PGSCHED_DSN.
COMMANDS = [
    ("migrate",),
    ("status",),
    ("status", "--json"),
    ("runs", "--json"),
    ("trigger", "fine"),
    ("cancel", "6f1c1c1e-1b1b-4c4c-9d9d-0123456789ab"),
    ("pause", "x"),
    ("resume", "x"),
    ("backfill", "app.py", "fine", "--from", "2027-01-01T00:00Z", "--to", "2027-01-01T01:00Z"),
    ("prune", "--older-than", "30d"),
]


def test_malformed_and_unreachable_dsns_never_show_the_password(
    secret: Secret, workdir: Path, base_env: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    """Every command with every bad DSN in every place: run by the CLI's entry point in this
    process (200 commands); the real ``python -m pgsched`` path is checked by the test below
    and by the whole run above."""
    unreachable = secret.url_with(secret.encoded, port="1")
    for dsn in [*_malformed(secret), unreachable]:
        for command in COMMANDS:
            for args, env in (
                (("--dsn", dsn, *command), base_env),
                ((*command, "--dsn", dsn), base_env),
                ((*command, f"--dsn={dsn}", "--schema", "elsewhere"), base_env),
                (command, {**base_env, "PGSCHED_DSN": dsn}),
            ):
                result = cli_in_process(args, env=env, cwd=workdir, capfd=capfd)
                one_line_error(result)
                assert result.returncode == 1, (args, result.stderr)  # refused by the database
                secret.assert_absent(result.stdout + result.stderr, f"{command} with {dsn!r}")


def test_bad_dsns_in_a_real_process_never_show_the_password(
    secret: Secret, workdir: Path, base_env: dict[str, str]
) -> None:
    """The matrix above through ``python -m pgsched`` for each bad DSN, given in each place
    once: what the interpreter itself prints (an uncaught error, a warning at exit) is seen."""
    unreachable = secret.url_with(secret.encoded, port="1")
    places: list[Callable[[str], tuple[tuple[str, ...], dict[str, str]]]] = [
        lambda dsn: (("--dsn", dsn, "status"), base_env),
        lambda dsn: (("runs", "--json", "--dsn", dsn), base_env),
        lambda dsn: (("trigger", "fine", f"--dsn={dsn}", "--schema", "elsewhere"), base_env),
        lambda dsn: (("migrate",), {**base_env, "PGSCHED_DSN": dsn}),
    ]
    for i, dsn in enumerate([*_malformed(secret), unreachable]):
        args, env = places[i % len(places)](dsn)
        result = cli(*args, cwd=workdir, env=env)
        one_line_error(result)
        assert result.returncode == 1, (args, result.stderr)
        secret.assert_absent(result.stdout + result.stderr, f"{args[0]} with {dsn!r}")


USAGE_ERRORS: list[Callable[[str], tuple[str, ...]]] = [
    lambda dsn: ("status", "--dsn", dsn, "--bogus"),
    lambda dsn: ("--dsn", dsn, "status", "--bogus", dsn),
    lambda dsn: ("status", dsn),
    lambda dsn: ("runs", "--limit", "x", "--dsn", dsn),
    lambda dsn: ("nosuchcommand", "--dsn", dsn),
]


def test_usage_errors_never_show_the_password(
    secret: Secret, workdir: Path, base_env: dict[str, str], capfd: pytest.CaptureFixture[str]
) -> None:
    """argparse quotes the arguments it rejects; a DSN among them is masked first. Each case
    in this process, and one per DSN through ``python -m pgsched``."""
    dsns = [secret.url_with(secret.encoded, port="1"), secret.kv, *_malformed(secret)]
    for i, dsn in enumerate(dsns):
        for n, usage in enumerate(USAGE_ERRORS):
            args = usage(dsn)
            if n == i % len(USAGE_ERRORS):
                result: Any = cli(*args, cwd=workdir, env=base_env)
            else:
                result = cli_in_process(args, env=base_env, cwd=workdir, capfd=capfd)
            one_line_error(result)
            assert result.returncode == 2, (args, result.stderr)
            secret.assert_absent(result.stdout + result.stderr, f"usage error of {args}")


def _run_briefly(
    dsn: str, workdir: Path, env: dict[str, str], replicas: list[Replica], *, flag: bool = False
) -> str:
    """``pgsched run`` with ``dsn`` in PGSCHED_DSN, or (``flag``) as ``--dsn`` after ``run``."""
    args = ["run", "app.py", "--http-port", "0", *(["--dsn", dsn] if flag else [])]
    replica = Replica(args, cwd=workdir, env=env if flag else {**env, "PGSCHED_DSN": dsn})
    replicas.append(replica)

    def failed_a_few_ticks() -> bool:
        return not replica.alive or len(replica.output().splitlines()) >= 4

    wait_until(failed_a_few_ticks, 20, "the replica to report its connection trouble")
    replica.stop(30)
    return replica.output()


@pytest.mark.parametrize("flag", [False, True], ids=["env", "flag-after-run"])
def test_a_replica_with_an_unreachable_database_never_shows_the_password(
    secret: Secret, workdir: Path, base_env: dict[str, str], replicas: list[Replica], flag: bool
) -> None:
    env = {**base_env, "KV_DSN": secret.kv, "PGSCHED_SCHEMA": "nowhere"}
    dsn = secret.url_with(secret.encoded, port="1")
    output = _run_briefly(dsn, workdir, env, replicas, flag=flag)
    assert "Connection refused" in output or "connection" in output.lower(), output
    secret.assert_absent(output, "pgsched run with an unreachable database")


def test_a_replica_with_a_malformed_dsn_never_shows_the_password(
    secret: Secret, workdir: Path, base_env: dict[str, str], replicas: list[Replica]
) -> None:
    env = {**base_env, "KV_DSN": secret.kv, "PGSCHED_SCHEMA": "nowhere"}
    output = _run_briefly(_malformed(secret)[0], workdir, env, replicas)
    secret.assert_absent(output, "pgsched run with a malformed DSN")
