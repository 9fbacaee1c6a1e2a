"""Two ``pgsched run`` replicas killed with SIGKILL leave the live replicas within three of
their renewal intervals (here 1 s, through ``PGSCHED_REPLICA_RENEWAL``): ``pgsched replicas``,
the API, ``pgsched web``'s dashboard, and ``pgsched forget``, which then removes their job,
all see them gone, while their rows stay until the 10-minute expiry removes them."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.support.net import http
from tests.support.replica import Replica, clean_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

APP = textwrap.dedent(
    """
    import pgsched
    scheduler = pgsched.Scheduler(tick_interval="0.5s")

    @scheduler.job(every="1h")
    def doomed(run):
        return 1
    """
)


def _web_url(web: Replica) -> str:
    for line in web.output().splitlines():
        if "the dashboard is on " in line:
            return line.split("the dashboard is on ", 1)[1].strip()
    assert web.alive, web.output()
    return ""


def test_sigkilled_replicas_are_gone_within_three_renewals_and_forget_works(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    (tmp_path / "app.py").write_text(APP)
    env = clean_env({"PGSCHED_DSN": pg_dsn, "PGSCHED_SCHEMA": schema})

    def pgsched(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pgsched", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert pgsched("migrate").returncode == 0
    renewing = {**env, "PGSCHED_REPLICA_RENEWAL": "1s"}
    doomed = [
        Replica.run("app.py", name, cwd=tmp_path, env=renewing) for name in ("doomed-a", "doomed-b")
    ]
    web = Replica(["web", "--http-port", "0"], cwd=tmp_path, env=env, name="web")
    try:
        base = wait_until(lambda: _web_url(web), 30, "pgsched web's address")

        def listed() -> list[str]:
            out = pgsched("replicas", "--json")
            assert out.returncode == 0, out.stderr
            return [r["runner_id"] for r in json.loads(out.stdout)["replicas"]]

        wait_until(lambda: listed() == ["doomed-a", "doomed-b"], 30, "both replicas live")
        refused = pgsched("forget", "doomed")
        assert refused.returncode != 0 and "still registered by live replica(s)" in refused.stderr

        for replica in doomed:
            replica.kill()  # SIGKILL: no clean stop removes the rows
        # Gone three renewal intervals (3 s) after their last renewal; the deadline leaves
        # room for each command's start-up on a loaded machine (the expiry is 10 minutes).
        wait_until(lambda: listed() == [], 30, "the killed replicas gone from pgsched replicas")
        page = http("GET", base).text
        shown = page.split('<section id="replicas"', 1)[1].split("</section>", 1)[0]
        assert "0 live" in shown and "doomed" not in shown, shown
        forgot = pgsched("forget", "doomed")
        assert forgot.returncode == 0, forgot.stderr
        status = pgsched("status", "--json")
        assert "doomed" not in status.stdout
        # Shown gone, but their rows are kept until the expiry (10 minutes) removes them.
        with psycopg.connect(pg_dsn) as conn:
            table = sql.Identifier(schema, "replicas")
            kept = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
        assert kept == (2,)
    finally:
        web.stop(30)
        for replica in doomed:
            replica.kill()
