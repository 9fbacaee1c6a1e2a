"""examples/fastapi_app.py under uvicorn, as a subprocess (docs/embedding.md): the scheduler
serves in the application's lifespan, the endpoints trigger and pause jobs through
``scheduler.aio``, and SIGTERM stops both cleanly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from tests.support.net import free_port
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def _call(base: str, method: str, path: str) -> tuple[int, Any]:
    request = urllib.request.Request(base + path, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _count(db: psycopg.Connection[Any], schema: str, where: str) -> int:
    query = sql.SQL("SELECT count(*) FROM {}.cron_executions WHERE " + where).format(
        sql.Identifier(schema)
    )
    return int(db.execute(query).fetchone()[0])  # type: ignore[index]


def test_fastapi_app_serves_the_scheduler_in_its_lifespan(
    pg_dsn: str, schema: str, db: psycopg.Connection[Any]
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update(PGSCHED_DSN=pg_dsn, PGSCHED_SCHEMA=schema, PGSCHED_LOG_FORMAT="json")
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "examples.fastapi_app:app", "--port", str(port)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:

        def listed() -> list[str] | None:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                status, body = _call(base, "GET", "/jobs")
            except OSError:
                return None
            jobs = [row["job"] for row in body] if status == 200 else []
            return jobs if "refresh_cache" in jobs else None

        wait_until(listed, 30, "the app to list its jobs")
        wait_until(
            lambda: _count(db, schema, "job_name = 'refresh_cache' AND status = 'SUCCESS'") >= 2,
            20,
            "the scheduled job to run twice",
        )

        status, body = _call(base, "POST", "/jobs/tenant_report/trigger")
        assert status == 400 and "tenant_report" in body["detail"], body  # needs a scope
        status, body = _call(base, "POST", "/jobs/tenant_report/trigger?scope=tenant:acme")
        assert status == 200 and body["created"] is True, body
        assert body["scope"] == {"kind": "tenant", "id": "acme"}, body
        wait_until(
            lambda: _count(db, schema, "trigger = 'manual' AND status = 'SUCCESS'") == 1,
            20,
            "the triggered run to succeed",
        )
        assert _call(base, "POST", "/jobs/nope/trigger")[0] == 404

        assert _call(base, "POST", "/jobs/refresh_cache/pause")[0] == 200
        paused = {row["job"]: row["paused"] for row in _call(base, "GET", "/jobs")[1]}
        assert paused["refresh_cache"] is True
        assert _call(base, "POST", "/jobs/refresh_cache/resume")[0] == 200
        done = _count(db, schema, "job_name = 'refresh_cache' AND status = 'SUCCESS'")
        wait_until(
            lambda: _count(db, schema, "job_name = 'refresh_cache' AND status = 'SUCCESS'") > done,
            20,
            "the resumed job to run again",
        )

        proc.send_signal(signal.SIGTERM)
        # uvicorn shuts the application down (the lifespan stops the scheduler), then
        # re-raises the signal it caught, so its exit status is the SIGTERM's.
        assert proc.wait(30) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    output = proc.stdout.read() if proc.stdout else ""
    assert "scheduler_stopped" in output, output[-3000:]
    assert "Application shutdown complete" in output, output[-3000:]
    assert _count(db, schema, "status = 'RUNNING'") == 0
