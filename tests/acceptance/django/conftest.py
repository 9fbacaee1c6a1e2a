"""The test Django project (tests/django_project) on each test's own schema: ``manage.py``
as a subprocess, its replicas as ``manage.py pgsched run``."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.support.replica import Replica, clean_env

REPO = Path(__file__).resolve().parents[3]
PROJECT = REPO / "tests" / "django_project"
PASSWORD = "django-db-pw-7f3a"  # the server trusts local connections: any password works


@dataclass
class Project:
    """The test project on the test's schema: ``manage.py ARGS`` runs and what they print."""

    env: dict[str, str]
    marks: Path

    def manage(self, *args: str, settings: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if settings is not None:
            env["DJANGO_SETTINGS_MODULE"] = f"site_settings.{settings}"
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def ok(self, *args: str) -> str:
        done = self.manage(*args)
        assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}{done.stderr}"
        assert PASSWORD not in done.stdout + done.stderr
        return done.stdout


@pytest.fixture
def project(pg_dsn: str, schema: str, tmp_path: Path) -> Iterator[Project]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        # Django's tables go there too (search_path in the project's OPTIONS).
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = clean_env(
        {
            "PGSCHED_TEST_DSN": pg_dsn,
            "PGSCHED_TEST_SCHEMA": schema,
            "PGSCHED_TEST_PASSWORD": PASSWORD,
            "SHOP_MARKS": str(tmp_path / "marks"),
            "PYTHONPATH": path,  # this checkout's pgsched, whatever the virtualenv has
        }
    )
    env.pop("DJANGO_SETTINGS_MODULE", None)
    yield Project(env, tmp_path / "marks")


def tables_of(pg_dsn: str, schema: str) -> list[str]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        names = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,),
        ).fetchall()
    return [n for (n,) in names]


def start_replica(project: Project, name: str, log_dir: Path, **env: str) -> Replica:
    """``manage.py pgsched run`` as replica ``name``, with ``env`` added to the project's."""
    return Replica(
        ["pgsched", "run", "--runner-id", name, "--http-port", "0"],
        cwd=PROJECT,
        env={**project.env, **env},
        name=name,
        log=log_dir / f"{name}.log",
        program=("manage.py",),
    )
