"""Three real replicas against one database: each plan runs once; a killed holder is replaced."""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from itertools import pairwise

import psycopg
import pytest
from psycopg import sql

from tests.acceptance.conftest import Replicas
from tests.helpers import wait_for

pytestmark = pytest.mark.acceptance


def _q(conn: psycopg.Connection, schema: str, text: str, params: tuple = ()) -> list[tuple]:
    """Run ``text`` with ``{s}`` standing for the test's schema."""
    return conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)), params).fetchall()


def test_three_replicas_run_every_plan_exactly_once(replicas: Replicas, db, schema) -> None:
    for i in range(3):
        replicas.start(f"replica-{i}")

    # 4 scopes x 1 plan per second: wait for a few seconds' worth of plans.
    wait_for(
        lambda: (
            _q(db, schema, "SELECT count(DISTINCT plan_time) FROM {s}.ledger WHERE job='fast'")[0][
                0
            ]
            >= 6
        ),
        timeout=30,
        what="six distinct plans of the fast job",
    )
    codes = replicas.terminate_all()
    assert codes == {"replica-0": 0, "replica-1": 0, "replica-2": 0}

    duplicates = _q(
        db,
        schema,
        "SELECT job, scope_id, plan_time, count(*) FROM {s}.ledger"
        " GROUP BY 1, 2, 3 HAVING count(*) > 1",
    )
    assert duplicates == []
    # Every plan between the first and the last one seen ran for every scope: none was lost.
    plans = [
        r[0]
        for r in _q(
            db, schema, "SELECT DISTINCT plan_time FROM {s}.ledger WHERE job='fast' ORDER BY 1"
        )
    ]
    inner = plans[1:-1]  # the edges may be partial when the replicas start and stop
    assert all(b - a == timedelta(seconds=1) for a, b in pairwise(plans))
    per_plan = dict(
        _q(
            db,
            schema,
            "SELECT plan_time, count(*) FROM {s}.cron_executions"
            " WHERE job_name='fast' AND status='SUCCESS' GROUP BY 1",
        )
    )
    assert all(per_plan.get(p) == 4 for p in inner), per_plan
    # The audit rows agree with the ledger: one SUCCESS row per executed (scope, plan).
    ledger_count = _q(db, schema, "SELECT count(*) FROM {s}.ledger WHERE job='fast'")[0][0]
    assert sum(per_plan.values()) == ledger_count


def test_sigkilled_holder_is_stolen_within_stale_timeout(replicas: Replicas, db, schema) -> None:
    for i in range(3):
        replicas.start(f"replica-{i}")
    first = wait_for(
        lambda: _q(
            db,
            schema,
            "SELECT plan_time, runner_id FROM {s}.ledger WHERE job='victim' AND attempt=1",
        ),
        timeout=30,
        interval=0.05,
        what="the victim's first attempt",
    )[0]
    plan_time, holder = first
    before = _q(
        db,
        schema,
        "SELECT id, lease_token, fencing_token FROM {s}.cron_executions"
        " WHERE job_name='victim' AND plan_time=%s",
        (plan_time,),
    )[0]
    os.kill(replicas.procs[holder].pid, signal.SIGKILL)
    killed_at = db.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]

    def stolen() -> list[tuple]:
        return _q(
            db,
            schema,
            "SELECT id, lease_token, fencing_token, attempt, runner_id, started_at, status"
            " FROM {s}.cron_executions WHERE job_name='victim' AND attempt=2"
            " AND status='SUCCESS'",
        )

    row = wait_for(stolen, timeout=20, what="the stolen lease to succeed")[0]
    exec_id, token, fencing, attempt, runner, started_at, _ = row
    assert attempt == 2
    assert exec_id == before[0]  # the same row, not a new plan
    assert token != before[1]
    assert fencing > before[2]
    assert runner != holder
    print(f"steal latency after SIGKILL: {(started_at - killed_at).total_seconds():.2f}s")
    # stale_timeout (4 s) + one tick (0.5 s) + 1.5 s for process scheduling on a small machine
    assert started_at - killed_at <= timedelta(seconds=6), started_at - killed_at

    replicas.procs.pop(holder)
    codes = replicas.terminate_all()
    assert set(codes.values()) == {0}
    attempts = _q(
        db, schema, "SELECT attempt, runner_id FROM {s}.ledger WHERE job='victim' ORDER BY attempt"
    )
    assert [a for a, _ in attempts] == [1, 2]
