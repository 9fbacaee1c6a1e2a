"""``pgsched explain`` and ``GET /api/jobs/{job}/explain`` against a real ``pgsched run``: a job
paused for a few of its plans, then resumed, shows one folded line of plans skipped as paused
between the runs before and after."""

from __future__ import annotations

import json
import textwrap
from datetime import timedelta
from typing import Any

import pytest
from psycopg.rows import dict_row

from tests.acceptance.operator_cli.ops import Ops
from tests.support.replica import Replica
from tests.support.rows import db_now, rows, table
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

APP = textwrap.dedent(
    """
    import pgsched

    scheduler = pgsched.Scheduler(tick_interval="1s")

    # every_plan: a tick that a loaded machine delays past the next plan runs both plans
    # (latest_only would skip the older as superseded, a second skipped line).
    @scheduler.job(every="1s", catch_up="every_plan", catch_up_window="1h",
                   max_plans_per_tick=10)
    def tick(run):
        return 1
    """
)


def _paused_spans(ops: Ops) -> list[dict[str, Any]]:
    with ops.db.cursor(row_factory=dict_row) as cur:
        cur.execute(
            f"SELECT * FROM {table(ops.schema, 'cron_skips').as_string(ops.db)}"
            " WHERE job_name = 'tick' AND reason = 'paused'"
        )
        spans: list[dict[str, Any]] = cur.fetchall()
        return spans


def test_explain_shows_the_plans_skipped_while_paused(bare_ops: Ops) -> None:
    ops = bare_ops
    (ops.workdir / "app.py").write_text(APP)
    replica = Replica.run("app.py", "explainer", cwd=ops.workdir, env=ops.env())
    try:
        port = replica.http_port()
        wait_until(lambda: replica.check_alive() or rows(ops.db, ops.schema, "tick"), 60, "a run")
        ops.ok("pause", "tick")
        paused_at = db_now(ops.db)
        wait_until(lambda: db_now(ops.db) > paused_at + timedelta(seconds=3.5), 20, "3 plans")
        ops.ok("resume", "tick")
        resumed_at = db_now(ops.db)
        found = wait_until(lambda: _paused_spans(ops), 30, "the paused span")
        wait_until(
            lambda: any(r["plan_time"] > resumed_at for r in rows(ops.db, ops.schema, "tick")),
            30,
            "a run after the resume",
        )
        since = min(r["plan_time"] for r in rows(ops.db, ops.schema, "tick")).isoformat()
        answer = json.loads(ops.ok("explain", "tick", "--since", since, "--json"))
        skipped = [x for x in answer["lines"] if x["state"] == "skipped"]
        assert [(x["reason"], x["plans"]) for x in skipped] == [("paused", found[0]["plans"])]
        assert found[0]["plans"] >= 3
        ran = [x for x in answer["lines"] if x["state"] == "ran"]
        assert ran and ran[0]["runner"] == "explainer" and ran[0]["status"] == "SUCCESS"
        assert ran[0]["first_plan"] < skipped[0]["first_plan"] < ran[-1]["first_plan"]

        text = ops.ok("explain", "tick", "--since", since)
        assert f"skipped (paused): {found[0]['plans']} plans" in text
        assert f"runs show {ran[0]['execution_id']}" in text

        api = replica.get(f"/api/jobs/tick/explain?since={since.replace('+', '%2B')}")
        assert api.status == 200, api.text
        assert [(x["reason"], x["plans"]) for x in api.json()["lines"] if x["reason"]] == [
            ("paused", found[0]["plans"])
        ]
        bad = replica.get("/api/jobs/tick/explain?sincee=yesterday")
        assert bad.status == 400 and "sincee" in bad.json()["error"]
        assert port
    finally:
        replica.kill()
