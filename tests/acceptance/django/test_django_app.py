"""pgsched.django in a real Django project (tests/django_project): ``manage.py migrate`` makes
pgsched's tables, ``manage.py pgsched ...`` runs pgsched's commands on the project's jobs.py
jobs and database, each ``manage.py`` a subprocess of its own."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.waiting import wait_until

from .conftest import PASSWORD, Project, start_replica, tables_of


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


def test_check_lists_the_jobs_of_jobs_py(project: Project) -> None:
    out = project.ok("pgsched", "check")
    for job in ("restock", "settle", "count_orders", "tally", "audit", "remind"):
        assert job in out
    assert "6 job(s) OK" in out


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
    replica = start_replica(project, "shop-1", tmp_path)
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
