"""Handlers on Django's ORM (tests/django_project/shop/jobs.py), in ``manage.py pgsched run``
replicas: a transactional run's ORM write commits with its SUCCESS or not at all (a replica
killed between the two leaves neither), the handler's connections are closed after each run,
and an ``async def`` handler uses the async ORM."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from tests.support.replica import Replica
from tests.support.waiting import wait_until

from .conftest import PROJECT, Project, start_replica


def trigger(project: Project, job: str) -> str:
    """``manage.py pgsched trigger JOB``: the execution id it queued."""
    return project.ok("pgsched", "trigger", job).strip()


def status_of(pg_dsn: str, schema: str, ident: str) -> tuple[str, Any]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            sql.SQL("SELECT status, rows_affected FROM {} WHERE id = %s").format(
                sql.Identifier(schema, "cron_executions")
            ),
            (ident,),
        ).fetchone()
    assert row is not None, ident
    return row[0], row[1]


def orders(pg_dsn: str, schema: str) -> list[str]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        rows = conn.execute(
            sql.SQL("SELECT name FROM {} ORDER BY id").format(sql.Identifier(schema, "shop_order"))
        ).fetchall()
    return [name for (name,) in rows]


def shop_connections(pg_dsn: str) -> int:
    """Open connections of the project's ORM (its OPTIONS name them ``shop``)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'shop'"
        ).fetchone()
    assert row is not None
    return int(row[0])


def succeeded(pg_dsn: str, schema: str, ident: str, replica: Replica) -> Any:
    def done() -> Any:
        replica.check_alive()
        status, result = status_of(pg_dsn, schema, ident)
        assert status not in ("FAILED", "DEAD"), (status, result)
        return status == "SUCCESS" and (True, result)

    return wait_until(done, 60, f"SUCCESS of {ident}")[1]


def test_orm_write_and_success_commit_together_and_a_kill_between_leaves_neither(
    project: Project, pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    project.ok("migrate")
    hold = tmp_path / "holding"
    first = start_replica(project, "shop-1", tmp_path, SHOP_HOLD=str(hold))
    try:
        ident = trigger(project, "settle")
        wait_until(lambda: first.check_alive() and hold.exists(), 60, "settle's ORM write")
        assert hold.read_text() == ident
    finally:
        first.kill()  # between the ORM write and the commit
    # Its transaction died with its connection: neither its order nor its SUCCESS.
    wait_until(lambda: shop_connections(pg_dsn) == 0, 30, "the killed replica's connection")
    assert orders(pg_dsn, schema) == []
    assert status_of(pg_dsn, schema, ident)[0] == "RUNNING"

    # Another replica takes the stale lease (11 s) and runs the plan again: once.
    second = start_replica(project, "shop-2", tmp_path)
    try:
        assert succeeded(pg_dsn, schema, ident, second) == 1  # the count it saw, its own order
        assert orders(pg_dsn, schema) == [f"settled {ident}"]
    finally:
        assert second.stop() == 0, second.output()[-3000:]


def test_a_handler_s_connections_are_closed_after_its_run(
    project: Project, pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    project.ok("migrate")
    replica = start_replica(project, "shop-1", tmp_path)
    try:
        for job in ("count_orders", "tally", "settle"):
            ident = trigger(project, job)
            succeeded(pg_dsn, schema, ident, replica)
            # CONN_MAX_AGE is 0: a run's connection is closed when the run ends, as a
            # request's is; the thread that ran it lives on, idle.
            wait_until(lambda: shop_connections(pg_dsn) == 0, 10, f"{job}'s connection closed")
    finally:
        assert replica.stop() == 0, replica.output()[-3000:]


def test_an_async_handler_uses_the_async_orm(
    project: Project, pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    project.ok("migrate")
    replica = start_replica(project, "shop-1", tmp_path)
    try:
        first = trigger(project, "tally")
        assert succeeded(pg_dsn, schema, first, replica) == 1
        second = trigger(project, "tally")
        assert succeeded(pg_dsn, schema, second, replica) == 2
        assert orders(pg_dsn, schema) == [f"tally {first}", f"tally {second}"]
    finally:
        assert replica.stop() == 0, replica.output()[-3000:]


def test_a_transactional_async_handler_is_refused_in_one_line(project: Project) -> None:
    code = (
        "import django; django.setup()\n"
        "from pgsched.django import scheduler\n"
        "@scheduler.job(every='1h', transactional=True)\n"
        "async def book(run): ...\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT,
        env={**project.env, "DJANGO_SETTINGS_MODULE": "site_settings.settings"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "job 'book': transactional=True needs a def handler under Django" in last
