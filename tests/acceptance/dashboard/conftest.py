"""What the dashboard's browser tests share (one set per worker): a real replica running
the APP below with the operator token, ``pgsched web`` with only the viewer token, a seeded
10,000-scope job, and Debian's Chromium driven by Playwright (never a downloaded browser).

Screenshots go to ``$PGSCHED_SCREENSHOTS`` when set, else to a folder under pytest's
temporary directory that the run keeps (its path is printed)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.replica import Replica, clean_env
from tests.support.waiting import wait_until

OPERATOR = f"op-{uuid.uuid4().hex}"
VIEWER = f"view-{uuid.uuid4().hex}"
HOSTILE = "<script>alert(1)</script>"
FANOUT_SCOPES = 10_000
FANOUT_PLANS = 3

APP = textwrap.dedent(
    f"""
    import pgsched
    scheduler = pgsched.Scheduler(tick_interval="0.5s", max_concurrency=8)

    @scheduler.job(every="2s", scopes=[pgsched.Scope("tenant", "acme"),
                                        pgsched.Scope("tenant", {HOSTILE!r}),
                                        pgsched.Scope("tenant", "zeta")])
    def tick(run):
        return 1

    @scheduler.job(every="3s", max_attempts=1)
    def boom(run):
        raise RuntimeError("upstream <i>unavailable</i>")

    @scheduler.job(every="1h")
    def hourly(run):
        return 1

    @scheduler.job(name="reminder", dynamic=True)
    def reminder(run):
        return 1

    scheduler.calendar("weekdays", pgsched.Calendar("mon-fri"))
    """
)


@dataclass
class Site:
    """The servers under test and the database they share."""

    dsn: str
    schema: str
    conn: psycopg.Connection[Any]
    replica: str  # base URL of the replica (operator token set), ending in "/"
    web: str  # base URL of `pgsched web` (viewer token only)
    shots: Path
    main: Replica  # the replica serving ``replica``

    def job_state(self, job: str) -> str:
        """What a failed wait on ``job`` should say: its rows by status, its cursor, whether
        the replica lives, and the replica's last log lines."""
        rows = self.q(
            "SELECT status, count(*) FROM {s}.cron_executions WHERE job_name = %s GROUP BY 1",
            (job,),
        )
        cursor = self.q(
            "SELECT next_plan_time, due_at, retired_at FROM {s}.cron_cursors WHERE job_name = %s",
            (job,),
        )
        tail = "\n".join(self.main.output().splitlines()[-15:])
        return (
            f"{job}: rows {rows}, cursor {cursor}, clock {self.one('SELECT clock_timestamp()')},"
            f" replica alive {self.main.alive}; its log ends:\n{tail}"
        )

    def q(self, text: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.execute(sql.SQL(text).format(s=sql.Identifier(self.schema)), params)
        return cur.fetchall() if cur.description else []

    def one(self, text: str, params: tuple[Any, ...] = ()) -> Any:
        return self.q(text, params)[0][0]


def _seed_fanout(site: Site) -> None:
    """A job of 10,000 scopes with three plans each, as replicas would have left it."""
    site.q("INSERT INTO {s}.job_state (job_name, schedule) VALUES ('fanout', 'every 1m')")
    site.q(
        "INSERT INTO {s}.cron_executions (job_name, scope_kind, scope_id, plan_time, trigger,"
        " status, attempt, max_attempts, runner_id, started_at, finished_at, duration_ms,"
        " error_code, error_msg)"
        " SELECT 'fanout', 'tenant', 's' || lpad(i::text, 5, '0'), p, 'schedule',"
        "   CASE WHEN i %% 97 = 0 THEN 'FAILED' ELSE 'SUCCESS' END, 1, 1, 'gone',"
        "   p + make_interval(secs => (i %% 7) * 0.1 + k),"
        "   p + make_interval(secs => (i %% 7) * 0.1 + k + 0.2), 200 + (i %% 50) * k * 10,"
        "   CASE WHEN i %% 97 = 0 THEN 'handler_error' END,"
        "   CASE WHEN i %% 97 = 0 THEN 'RuntimeError: no quota' END"
        " FROM generate_series(0, %s - 1) AS i,"
        "   generate_series(1, %s) AS k,"
        "   LATERAL (SELECT date_trunc('minute', clock_timestamp()) - k * interval '1 minute'"
        "            AS p) AS plan",
        (FANOUT_SCOPES, FANOUT_PLANS),
    )
    site.q("ANALYZE {s}.cron_executions")


def _schedules(dsn: str, schema: str) -> None:
    import pgsched

    specs = [
        pgsched.ScheduleSpec(
            pgsched.Scope("user", f"user-{i:03d}"),
            cron="0 9 * * *",
            timezone="Europe/Berlin",
            payload={"text": f"hello {i}"},
        )
        for i in range(25)
    ]
    specs.append(
        pgsched.ScheduleSpec(pgsched.Scope("user", HOSTILE), every="1h", payload={"html": HOSTILE})
    )
    with pgsched.Admin(dsn, schema) as admin:
        admin.put_schedules("reminder", specs)


@pytest.fixture(scope="package")
def site(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    if CHROMIUM is None:
        pytest.fail("Debian's chromium is missing: apt-get install chromium")
    work = tmp_path_factory.mktemp("dashboard")
    shots = Path(os.environ.get("PGSCHED_SCREENSHOTS") or tmp_path_factory.mktemp("shots"))
    shots.mkdir(parents=True, exist_ok=True)
    print(f"\ndashboard screenshots: {shots}")
    schema = f"t_dash_{uuid.uuid4().hex[:10]}"
    (work / "app.py").write_text(APP)
    base = clean_env({"PGSCHED_DSN": pg_dsn, "PGSCHED_SCHEMA": schema})
    subprocess.run(
        [sys.executable, "-m", "pgsched", "migrate"], env=base, check=True, capture_output=True
    )
    conn = psycopg.connect(pg_dsn, autocommit=True)
    replica = Replica.run(
        "app.py", "dash-main", cwd=work, env={**base, "PGSCHED_HTTP_TOKEN": OPERATOR}
    )
    web = Replica(
        ["web", "--port", "0"],
        cwd=work,
        env={**base, "PGSCHED_HTTP_VIEW_TOKEN": VIEWER},
        name="web",
    )
    try:
        replica_url = f"http://127.0.0.1:{replica.http_port()}/"
        line = wait_until(lambda: _web_url(web), 30, "pgsched web's address")
        site = Site(pg_dsn, schema, conn, replica_url, line, shots, replica)
        wait_until(
            lambda: site.one("SELECT count(*) FROM {s}.job_state WHERE job_name = 'reminder'"),
            30,
            "the replica's registration",
        )
        _schedules(pg_dsn, schema)
        _seed_fanout(site)
        yield site
    finally:
        for proc in (web, replica):
            proc.stop(30)
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.close()
        if os.environ.get("PGSCHED_SCREENSHOTS") is None:
            shutil.copytree(shots, work / "kept-shots", dirs_exist_ok=True)


def _web_url(web: Replica) -> str:
    for line in web.output().splitlines():
        if "the dashboard is on " in line:
            return line.split("the dashboard is on ", 1)[1].strip()
    assert web.alive, web.output()
    return ""


@pytest.fixture(scope="package")
def browser(site: Site) -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    opened = context.new_page()
    opened.set_default_timeout(20_000)
    yield opened
    context.close()
