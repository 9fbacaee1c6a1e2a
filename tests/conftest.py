"""The tests' PostgreSQL (README, "Try it"): PGSCHED_TEST_DSN, else testcontainers, else embedded.

Every test that touches the database gets a schema of its own (``schema`` fixture), so tests
never see each other's rows and can run against a shared server.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.postgres import PrivateServer


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
    # An embedded PostgreSQL on a free loopback port, so its DSN is an ordinary
    # postgresql://postgres@127.0.0.1:PORT/postgres that libpq, psql and PgBouncer all read.
    with PrivateServer.create() as server:
        yield server.dsn()


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


def _tier(item: pytest.Item) -> str | None:
    parts = item.path.resolve().relative_to(Path(__file__).resolve().parent).parts
    return parts[0] if len(parts) > 1 and parts[0] in _TIERS else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = _tier(item)
        if tier is not None:
            item.add_marker(tier)


def pytest_runtest_setup(item: pytest.Item) -> None:
    # A test outside every tier (in tests/support, say) carries no marker, so the fast loop
    # and each tier's run would leave it out: it fails rather than run unseen.
    if _tier(item) is None:
        pytest.fail(
            f"{item.nodeid}: a test must live in a tier's folder ({', '.join(_TIERS)})",
            pytrace=False,
        )


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


# Set for the whole session too, so that replicas a module- or package-scoped fixture starts
# before any test's own setting see the same default.
os.environ["PGSCHED_FIRST_SIGHT"] = "latest"


@pytest.fixture(autouse=True)
def _first_sight(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Most tests register a job and expect its plan already due to run at once: they run
    with the job option ``first_sight="latest"`` as the default (``PGSCHED_FIRST_SIGHT``, which
    the replicas and commands they start inherit). Tests marked ``first_sight`` see the
    default a deployment has, ``"next"``."""
    if request.node.get_closest_marker("first_sight") is None:
        monkeypatch.setenv("PGSCHED_FIRST_SIGHT", "latest")
    else:
        monkeypatch.delenv("PGSCHED_FIRST_SIGHT", raising=False)
