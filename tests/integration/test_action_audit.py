"""Every operator action is recorded in the action log the dashboard shows, whichever surface
made it: ``Admin``, ``AsyncAdmin`` and the HTTP API here (the command line in
tests/acceptance/operator_cli/test_audit.py), each with its surface and actor, in the same
transaction as the action."""

from __future__ import annotations

import asyncio
import functools
import getpass
import socket
from datetime import UTC, datetime
from typing import Any

import pytest
from psycopg import sql
from psycopg.rows import dict_row

import pgsched
from tests.integration.conftest import SchedulerFactory
from tests.support.net import http
from tests.support.rows import table

pytestmark = pytest.mark.integration


def _seed_job(db: Any, schema: str, job: str) -> None:
    db.execute(
        sql.SQL("INSERT INTO {} (job_name) VALUES (%s)").format(table(schema, "job_state")), (job,)
    )


def _log(db: Any, schema: str) -> list[dict[str, Any]]:
    """The action log, oldest first."""
    cur = db.cursor(row_factory=dict_row)
    query = sql.SQL("SELECT * FROM {} ORDER BY id").format(table(schema, "actions"))
    return list(cur.execute(query).fetchall())


def _paused(db: Any, schema: str, job: str) -> bool:
    query = sql.SQL("SELECT paused FROM {} WHERE job_name = %s").format(table(schema, "job_state"))
    row = db.execute(query, (job,)).fetchone()
    return bool(row[0])


def test_admin_actions_are_recorded_with_its_actor(
    migrated: str, db: Any, runtime_dsn: str
) -> None:
    _seed_job(db, migrated, "nightly")
    at = datetime(2031, 5, 1, 3, tzinfo=UTC)
    with pgsched.Admin(runtime_dsn, migrated, actor="deploy-bot") as admin:
        admin.pause("nightly")
        admin.resume("nightly")
        done = admin.trigger("nightly", at=at)
        assert done.id is not None
        admin.cancel(done.id)
        with pytest.raises(pgsched.NotFoundError):
            admin.pause("nope")
        seen = admin.actions("nightly")
    with pgsched.Admin(runtime_dsn, migrated) as anonymous:
        anonymous.forget("nightly")

    log = _log(db, migrated)
    assert [(r["surface"], r["actor"], r["action"], r["outcome"]) for r in log] == [
        ("admin", "deploy-bot", "pause", "ok"),
        ("admin", "deploy-bot", "resume", "ok"),
        ("admin", "deploy-bot", "trigger", "ok"),
        ("admin", "deploy-bot", "cancel", "ok"),
        ("admin", "deploy-bot", "pause", "error"),
        ("admin", f"python:{getpass.getuser()}@{socket.gethostname()}", "forget", "ok"),
    ]
    trigger, cancel, refused = log[2], log[3], log[4]
    assert trigger["job_name"] == "nightly" and trigger["scope"] == "global:global"
    assert trigger["execution_id"] == done.id
    assert trigger["details"] == {"at": at.isoformat(), "created": True}
    # an action on an execution is filed under its job, for the job's page
    assert (cancel["job_name"], cancel["execution_id"]) == ("nightly", done.id)
    assert refused["job_name"] == "nope" and "unknown job 'nope'" in refused["detail"]
    # what the dashboard reads back, newest first
    assert [(a.surface, a.action) for a in seen][:2] == [("admin", "cancel"), ("admin", "trigger")]
    assert all(r["at"] is not None for r in log)


def test_async_admin_actions_are_recorded(migrated: str, db: Any, runtime_dsn: str) -> None:
    _seed_job(db, migrated, "hourly")

    async def act() -> pgsched.Triggered:
        async with pgsched.AsyncAdmin(runtime_dsn, migrated, actor="worker-7") as admin:
            await admin.pause("hourly")
            return await admin.trigger("hourly")

    done = asyncio.run(act())
    log = _log(db, migrated)
    assert [(r["surface"], r["actor"], r["action"]) for r in log] == [
        ("async_admin", "worker-7", "pause"),
        ("async_admin", "worker-7", "trigger"),
    ]
    assert log[1]["execution_id"] == done.id and log[1]["details"] == {"created": True}
    assert _paused(db, migrated, "hourly")


def test_http_api_and_dashboard_actions_are_recorded_and_shown(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PGSCHED_HTTP_TOKEN", "s3cret-operator")
    monkeypatch.setenv("PGSCHED_HTTP_TOKEN_LABEL", "oncall")
    s = make_scheduler("web")
    s.register(lambda run: None, name="api_job", every="1h")

    async def serve_and_act() -> tuple[list[int], str]:
        server = asyncio.create_task(s.serve(http_port=0))
        async with asyncio.timeout(30):  # a deadline: a failure, not a hang
            while s.http_port is None:
                await asyncio.sleep(0.02)
        root = f"http://127.0.0.1:{s.http_port}"
        base = f"{root}/api/jobs/api_job"
        token = "s3cret-operator"
        form = b"action=resume&job=api_job&back=%2F"  # the dashboard's form, by a script
        requests: list[tuple[str, dict[str, Any]]] = [
            (f"{base}/pause", {"token": token}),
            (f"{base}/trigger", {"body": {}, "token": token}),
            (f"{base}/resume", {"token": "wrong"}),
            (f"{root}/action", {"body": form, "token": token}),
        ]
        statuses = [
            (await asyncio.to_thread(functools.partial(http, "POST", url, **kw))).status
            for url, kw in requests
        ]
        page = (await asyncio.to_thread(http, "GET", f"{root}/")).text
        s.stop()
        await asyncio.wait_for(server, 30)
        return statuses, page

    statuses, page = asyncio.run(serve_and_act())
    assert statuses[:3] == [200, 201, 401] and statuses[3] in (200, 303), statuses
    log = _log(db, migrated)
    assert [(r["surface"], r["action"], r["outcome"]) for r in log] == [
        ("http", "pause", "ok"),
        ("http", "trigger", "ok"),
        ("dashboard", "resume", "ok"),
    ]
    assert all(r["actor"].startswith("oncall #") for r in log)
    assert all(r["actor"].endswith(" from 127.0.0.1") for r in log)
    assert "s3cret" not in repr(log)
    # the overview's action log shows each action's surface
    actions = page.split("who did what", 1)[1]
    assert ">surface<" in actions and ">dashboard<" in actions and ">http<" in actions
