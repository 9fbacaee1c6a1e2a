"""A replica with both tokens: reading the JSON API needs the viewer (or operator) token,
writing needs the operator token, and the probes and /metrics stay open."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from tests.support.replica import Replica, clean_env

pytestmark = pytest.mark.acceptance

APP = textwrap.dedent(
    """
    import pgsched
    scheduler = pgsched.Scheduler(tick_interval="0.5s")

    @scheduler.job(every="1h")
    def hourly(run):
        return 1
    """
)


def test_viewer_token_guards_api_reads_only(pg_dsn: str, schema: str, tmp_path: Path) -> None:
    operator, viewer = f"op-{uuid.uuid4().hex}", f"view-{uuid.uuid4().hex}"
    (tmp_path / "app.py").write_text(APP)
    env = clean_env({"PGSCHED_DSN": pg_dsn, "PGSCHED_SCHEMA": schema})
    subprocess.run(
        [sys.executable, "-m", "pgsched", "migrate"], env=env, check=True, capture_output=True
    )
    tokens = {"PGSCHED_HTTP_TOKEN": operator, "PGSCHED_HTTP_VIEW_TOKEN": viewer}
    replica = Replica.run("app.py", "viewed", cwd=tmp_path, env={**env, **tokens})
    try:
        replica.http_port()
        for path in ("/api/jobs", "/api/runs", "/api/replicas", "/"):
            assert replica.get(path).status == 401, path
            assert replica.get(path, token=viewer).status == 200, path
            assert replica.get(path, token=operator).status == 200, path
        for path in ("/metrics", "/healthz"):
            assert replica.get(path).status == 200, path
        assert replica.post("/api/jobs/hourly/pause", token=viewer).status == 401
        assert replica.post("/api/jobs/hourly/pause", token=operator).status == 200
        assert replica.post("/api/jobs/hourly/resume", token=operator).status == 200
        page = replica.get("/", token=operator).text
        assert page.count("operator #") == 2  # both actions in the log, under the label
        assert operator not in page and viewer not in page
    finally:
        replica.stop(30)
    assert operator not in replica.output() and viewer not in replica.output()
