"""pgsched.django in a real Django project (tests/django_project): ``manage.py migrate`` makes
pgsched's tables, ``manage.py pgsched ...`` runs pgsched's commands on the project's jobs.py
jobs and database, each ``manage.py`` a subprocess of its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.replica import Replica, clean_env
from tests.support.waiting import wait_until

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


def tables(pg_dsn: str, schema: str) -> dict[str, Any]:
    """The schema's tables and pgsched's applied migrations (with when each was applied)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        applied = conn.execute(
            sql.SQL("SELECT version, applied_at FROM {} ORDER BY version").format(
                sql.Identifier(schema, "schema_migrations")
            )
        ).fetchall()
    return {"tables": sorted(tables_of(pg_dsn, schema)), "applied": applied}


def test_migrate_makes_pgsched_tables_once(project: Project, pg_dsn: str, schema: str) -> None:
    out = project.ok("migrate")
    assert "Applying pgsched.0001_initial... OK" in out
    made = tables(pg_dsn, schema)
    assert {"cron_executions", "schema_migrations", "django_migrations"} <= set(made["tables"])
    assert made["applied"]

    assert "No migrations to apply" in project.ok("migrate")
    assert tables(pg_dsn, schema) == made
    # Unapplied (its reverse keeps the tables) and applied again: pgsched's own migration runs
    # on tables it already made and changes nothing.
    project.ok("migrate", "pgsched", "zero")
    assert tables(pg_dsn, schema) == made
    assert "Applying pgsched.0001_initial... OK" in project.ok("migrate", "pgsched")
    assert tables(pg_dsn, schema) == made


def test_migrate_acts_on_the_pgsched_database_only(
    project: Project, pg_dsn: str, schema: str
) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(f"{schema}_jobs")))
    try:
        project.env["DJANGO_SETTINGS_MODULE"] = "site_settings.multi_db"
        assert "Applying pgsched.0001_initial... OK" in project.ok("migrate")
        assert "schema_migrations" not in tables_of(pg_dsn, schema)
        project.ok("migrate", "--database", "jobs")
        assert "schema_migrations" in tables_of(pg_dsn, schema)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(f"{schema}_jobs")))


def tables_of(pg_dsn: str, schema: str) -> list[str]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        names = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,),
        ).fetchall()
    return [n for (n,) in names]


def test_check_lists_the_jobs_of_jobs_py(project: Project) -> None:
    out = project.ok("pgsched", "check")
    assert "restock" in out
    assert "1 job(s) OK" in out


def test_pgsched_help_is_pgsched_s_own(project: Project) -> None:
    out = project.ok("pgsched", "runs", "--help")
    assert "usage: manage.py pgsched runs" in out
    assert "--status" in out


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("pgsched: error: ")
    return done.stderr


@pytest.mark.parametrize("command", ["check", "status"])
def test_settings_pgsched_cannot_use_are_one_line(project: Project, command: str) -> None:
    sqlite = one_line_error(project.manage("pgsched", command, settings="sqlite"))
    assert "DATABASES['default']" in sqlite
    assert "django.db.backends.sqlite3" in sqlite
    unknown = one_line_error(project.manage("pgsched", command, settings="unknown_key"))
    assert "'TICK_INTERVALL'" in unknown


def test_django_checks_report_the_settings(project: Project) -> None:
    done = project.manage("check", settings="sqlite")
    assert done.returncode == 1
    assert "(pgsched.E001)" in done.stderr
    assert "django.db.backends.sqlite3" in done.stderr


def test_run_runs_the_job_and_runs_shows_its_success(project: Project, tmp_path: Path) -> None:
    project.ok("migrate")
    replica = Replica(
        ["pgsched", "run", "--runner-id", "shop-1", "--http-port", "0"],
        cwd=PROJECT,
        env=project.env,
        name="shop-1",
        log=tmp_path / "shop-1.log",
        program=("manage.py",),
    )
    try:
        wait_until(
            lambda: replica.check_alive() and any(project.marks.glob("*")),
            60,
            lambda: f"a restock run; the replica's log:\n{replica.output()[-3000:]}",
        )

        def succeeded() -> list[dict[str, Any]]:
            runs = json.loads(project.ok("pgsched", "runs", "--job", "restock", "--json"))
            return [r for r in runs["runs"] if r["status"] == "SUCCESS"]

        done = wait_until(succeeded, 30, "a SUCCESS of restock in manage.py pgsched runs")
        assert done[0]["runner_id"] == "shop-1"
        ran = {p.name: p.read_text() for p in project.marks.iterdir()}
        assert ran[str(done[0]["id"])] == "shop-1"
        assert "restock" in project.ok("pgsched", "status")
        replica.wait_sigterm_handled()
    finally:
        code = replica.stop()
    assert code == 0, replica.output()[-3000:]
    # It logged where its database is: the DSN, password masked.
    assert replica.events("database_dsn")
    assert PASSWORD not in replica.output()
