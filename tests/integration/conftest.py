"""Fixtures of the integration tests (real PostgreSQL; see tests/conftest.py).

The schedulers the tests build run as the least-privilege *runtime* role of ``sql/roles.sql``
(DML on pgsched's tables, no DDL), exactly as production replicas do; the migrations run as
the *owner* role. Both roles are created once per session when the test database user is a
superuser (and ``psql`` is installed, to run ``sql/roles.sql`` itself); otherwise every
scheduler uses the plain test DSN and a warning says so. Tests that seed or inspect rows keep
using the superuser ``db`` connection.
"""

from __future__ import annotations

import shutil
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

import pgsched
from tests.support.roles import DbRoles, Role

SchedulerFactory = Callable[..., pgsched.Scheduler]


@pytest.fixture(scope="session")
def db_roles(pg_dsn: str) -> Iterator[DbRoles]:
    """Owner and runtime roles for the whole session, dropped at its end."""
    roles = DbRoles(admin_dsn=pg_dsn, psql=shutil.which("psql"))
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    superuser = bool(row and row[0])
    if not superuser or roles.psql is None:
        why = "is not a superuser" if not superuser else "has no psql to run sql/roles.sql"
        warnings.warn(
            f"the test database user {why}: the integration schedulers run with the plain "
            "test DSN, not as the least-privilege runtime role",
            stacklevel=1,
        )
        yield roles
        return
    suffix = uuid.uuid4().hex[:8]
    roles.owner, roles.runtime = f"pgsched_it_owner_{suffix}", f"pgsched_it_runtime_{suffix}"
    roles.owner_password = f"owner-{uuid.uuid4().hex[:12]}"
    roles.runtime_password = f"runtime-{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        for name, password in (
            (roles.owner, roles.owner_password),
            (roles.runtime, roles.runtime_password),
        ):
            conn.execute(
                sql.SQL(
                    "CREATE ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {}"
                ).format(sql.Identifier(name), sql.Literal(password))
            )
    try:
        yield roles
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            for name in (roles.runtime, roles.owner):
                ident = sql.Identifier(name)
                conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(ident))
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(ident))


@pytest.fixture
def runtime_dsn(db_roles: DbRoles) -> str:
    """The DSN of the least-privilege runtime role (the plain DSN when roles are off)."""
    return db_roles.dsn("runtime")


@pytest.fixture
def owner_dsn(db_roles: DbRoles) -> str:
    """The DSN of the schema owner, which runs the migrations."""
    return db_roles.dsn("owner")


@pytest.fixture
def make_scheduler(schema: str, db_roles: DbRoles) -> SchedulerFactory:
    """Build Schedulers on the test's schema: ``make_scheduler("r2", max_concurrency=5)``.

    They connect as the runtime role; ``role="owner"`` (to migrate) or ``"superuser"`` picks
    another. Asking for a runtime or owner scheduler applies ``sql/roles.sql`` to the schema.
    """

    def make(runner_id: str = "r1", *, role: Role = "runtime", **options: Any) -> pgsched.Scheduler:
        options.setdefault("tick_interval", "1s")
        if role != "superuser":
            db_roles.prepare(schema)
        return pgsched.Scheduler(
            dsn=db_roles.dsn(role), schema=schema, runner_id=runner_id, **options
        )

    return make


@pytest.fixture
def migrated(schema: str, db_roles: DbRoles) -> str:
    """The test's schema: prepared by ``sql/roles.sql`` and migrated by the owner role."""
    db_roles.prepare(schema)
    pgsched.Scheduler(dsn=db_roles.dsn("owner"), schema=schema, runner_id="migrator").migrate()
    return schema
