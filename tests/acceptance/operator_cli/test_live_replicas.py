"""``pgsched replicas``, ``GET /api/replicas`` and ``pgsched forget`` against real ``pgsched
run`` replicas: each live replica listed with its jobs and HTTP address, a replica stopped
with SIGTERM gone at once, a killed one gone once its (short, for the test) expiry passed, and
a job no replica runs any more forgotten while its history stays."""

from __future__ import annotations

import json
import signal
import socket
import textwrap
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from importlib.metadata import version
from typing import Any

import pytest

from tests.acceptance.operator_cli.ops import Ops, assert_one_line_error, fmt, parse_table
from tests.support.replica import Replica
from tests.support.rows import db_now, rows
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

# A killed replica's row is hidden once not refreshed for this long (10 minutes by default).
EXPIRY = "3s"


def app(*jobs: str) -> str:
    body = "".join(
        textwrap.dedent(
            f"""
            @scheduler.job(name={job!r}, every="1h")
            def job_{job}(run):
                return 1
            """
        )
        for job in jobs
    )
    return _HEAD + body


# `far` has one plan, the instant the test puts in FAR_PLAN: its next plan whenever it runs.
_HEAD = textwrap.dedent(
    """
    import os
    from datetime import datetime
    import pgsched

    scheduler = pgsched.Scheduler(tick_interval="0.5s")

    class FarPlan:
        def plans_between(self, start, end):
            plan = datetime.fromisoformat(os.environ["FAR_PLAN"])
            return [plan] if start < plan <= end else []

    @scheduler.job(planner=FarPlan())
    def far(run):
        return 1
    """
)


ReplicaFactory = Callable[[str, str], Replica]


@pytest.fixture
def far_plan(bare_ops: Ops) -> datetime:
    """A day after the database's now, in whole seconds."""
    return db_now(bare_ops.db).replace(microsecond=0) + timedelta(days=1)


@pytest.fixture
def start(bare_ops: Ops, far_plan: datetime) -> Iterator[ReplicaFactory]:
    started: list[Replica] = []

    def run(runner_id: str, app_text: str) -> Replica:
        (bare_ops.workdir / f"{runner_id}.py").write_text(app_text)
        env = bare_ops.env(PGSCHED_REPLICA_EXPIRY=EXPIRY, FAR_PLAN=far_plan.isoformat())
        replica = Replica.run(f"{runner_id}.py", runner_id, cwd=bare_ops.workdir, env=env)
        replica.http_port()
        started.append(replica)
        return replica

    yield run
    for replica in started:
        replica.kill()


def listed(ops: Ops) -> dict[str, dict[str, Any]]:
    """``pgsched replicas --json`` by runner id."""
    return {r["runner_id"]: r for r in json.loads(ops.ok("replicas", "--json"))["replicas"]}


def test_replicas_lists_each_live_replica_and_drops_stopped_and_killed_ones(
    bare_ops: Ops, start: ReplicaFactory, far_plan: datetime
) -> None:
    first = start("first", app("alpha"))
    second = start("second", app("alpha", "beta"))
    both = wait_until(lambda: len(found := listed(bare_ops)) == 2 and found, 30, "two replicas")
    assert both["first"]["jobs"] == ["alpha", "far"]
    assert both["second"]["jobs"] == ["alpha", "beta", "far"]
    for replica in (first, second):
        row = both[replica.name]
        assert row["http_address"] == f"http://127.0.0.1:{replica.port}/"
        assert row["host"] == socket.gethostname()
        assert row["version"] == version("pgsched")
        assert row["started_at"] <= row["seen_at"]

    table = {r["RUNNER"]: r for r in parse_table(bare_ops.ok("replicas"))}
    assert table["second"]["JOBS"] == "alpha, beta, far"
    assert table["first"]["HTTP"] == f"http://127.0.0.1:{first.port}/"
    assert table["first"]["VERSION"] == version("pgsched")

    api = second.get("/api/replicas")
    assert api.status == 200
    assert [r["runner_id"] for r in api.json()["replicas"]] == ["first", "second"]
    page = second.get("/").text
    listing = page[page.index("<h2>Replicas") : page.index("<h2>Stale leases")]
    assert "2 live" in listing
    for replica in (first, second):
        assert f"<strong>{replica.name}</strong>" in listing
        assert f"http://127.0.0.1:{replica.port}/" in listing
    assert "alpha, beta" in listing

    status = {r["JOB"]: r for r in parse_table(bare_ops.ok("status"))}
    assert status["far"]["NEXT PLAN"] == fmt(far_plan)
    jobs = {j["job"]: j for j in second.get("/api/jobs").json()["jobs"]}
    assert datetime.fromisoformat(jobs["far"]["next_plan"]) == far_plan

    first.signal(signal.SIGTERM)
    assert first.stop() == 0
    assert list(listed(bare_ops)) == ["second"]  # a clean stop removed its row at once

    second.signal(signal.SIGKILL)
    second.kill()
    wait_until(lambda: listed(bare_ops) == {}, 30, "the killed replica's row to expire")
    assert bare_ops.ok("replicas") == "no live replicas\n"


def test_forget_removes_a_job_no_live_replica_runs_and_keeps_its_history(
    bare_ops: Ops, start: ReplicaFactory
) -> None:
    old = start("old", app("stays", "goes"))
    wait_until(lambda: rows(bare_ops.db, bare_ops.schema, "goes"), 30, "goes's current plan")
    bare_ops.ok("pause", "goes")
    assert_one_line_error(
        bare_ops("forget", "goes"), "job 'goes' is still registered by live replica(s) old"
    )

    old.signal(signal.SIGTERM)
    assert old.stop() == 0
    new = start("new", app("stays"))  # the next release no longer has `goes`
    wait_until(lambda: "new" in listed(bare_ops), 30, "the new replica")
    kept = {r["JOB"]: r for r in parse_table(bare_ops.ok("status"))}
    assert kept["goes"]["PAUSED"] == "yes"  # a job no replica registers keeps its pause flag
    assert 'job="goes"' in new.get("/metrics").text

    assert bare_ops.ok("forget", "goes") == "forgot goes (its history stays)\n"
    assert [r["JOB"] for r in parse_table(bare_ops.ok("status"))] == ["far", "stays"]
    assert [j["job"] for j in new.get("/api/jobs").json()["jobs"]] == ["far", "stays"]
    wait_until(lambda: 'job="goes"' not in new.get("/metrics").text, 30, "goes to leave the gauges")
    assert [r["status"] for r in rows(bare_ops.db, bare_ops.schema, "goes")] == ["SUCCESS"]
    assert_one_line_error(bare_ops("forget", "goes"), "unknown job 'goes'")
