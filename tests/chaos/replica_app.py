"""The config module every chaos replica runs: ``pgsched run tests/chaos/replica_app.py``.

Two jobs with the same schedule and lease timing, read from ``CHAOS_*`` variables (see
``timing.Timing``):

- ``tx`` (``transactional=True``) writes its ledger row through ``run.conn``, so the row
  commits together with the SUCCESS row, and only while the lease holds;
- ``plain`` writes its ledger row on a connection of its own before doing its "work", the
  usual non-transactional side effect, which a run killed before SUCCESS leaves behind.

Both sleep a random while (the work), then ask ``run.heartbeat()`` whether they still hold
the lease; a handler that is told it lost it records a notice (on the harness's direct
connection) and returns anyway, so its late write reaches pgsched and must be refused. Both
return their lease and fencing tokens as the result, which is how the harness checks that a
SUCCESS row was written by the lease holder of record.

Handlers wait with ``threading.Event().wait``, never ``time.sleep``: under libfaketime with
``FAKETIME_DONT_FAKE_MONOTONIC=1``, Python 3.11's ``time.sleep`` (``clock_nanosleep`` with
``TIMER_ABSTIME``) fails with EINVAL (libfaketime issue #426).
"""

from __future__ import annotations

import os
import random
import threading
import time
from datetime import UTC, datetime
from typing import Any

import psycopg
from psycopg import sql

import pgsched

SCHEMA = os.environ["PGSCHED_SCHEMA"]
# Side effects travel the way the replica's own traffic does (through its proxy, if any);
# notices are the harness's instrumentation and go straight to the server.
SIDE_DSN = os.environ["PGSCHED_DSN"]
DIRECT_DSN = os.environ["CHAOS_DIRECT_DSN"]


def _seconds(name: str) -> float:
    return float(os.environ[name])


EVERY = _seconds("CHAOS_EVERY_S")
WORK_MIN, WORK_MAX = _seconds("CHAOS_WORK_MIN_S"), _seconds("CHAOS_WORK_MAX_S")

scheduler = pgsched.Scheduler(
    tick_interval=_seconds("CHAOS_TICK_S"),
    max_concurrency=int(os.environ["CHAOS_MAX_CONCURRENCY"]),
    shutdown_grace="1s",  # the checked plans are drained before the replicas stop
    statement_timeout=_seconds("CHAOS_STATEMENT_TIMEOUT_S"),
)

COMMON: dict[str, Any] = {
    "every": EVERY,
    "scopes": [pgsched.Scope("shard", str(i)) for i in range(int(os.environ["CHAOS_SCOPES"]))],
    "catch_up": "every_plan",  # every plan must run: a missing one is a lost plan (O3)
    "max_plans_per_tick": 4,
    "catch_up_window": "3m",
    "run_timeout": _seconds("CHAOS_RUN_TIMEOUT_S"),
    "stale_timeout": _seconds("CHAOS_STALE_TIMEOUT_S"),
    "heartbeat_interval": _seconds("CHAOS_HEARTBEAT_S"),
    "max_attempts": int(os.environ["CHAOS_MAX_ATTEMPTS"]),
    "retry_backoff": ["1s"],
    # plain too: the scenarios count steals of both jobs' leases (a kill must lose no plan)
    "allow_stale_reentry": True,
}

LEDGER = sql.SQL(
    "INSERT INTO {}.chaos_ledger (kind, job, scope_id, plan_time, attempt, execution_id,"
    " lease_token, fencing_token, runner_id, pid, replica_wall)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
).format(sql.Identifier(SCHEMA))
NOTICE = sql.SQL(
    "INSERT INTO {}.chaos_notices (what, runner_id, pid, execution_id, lease_token,"
    " fencing_token) VALUES (%s, %s, %s, %s, %s, %s)"
).format(sql.Identifier(SCHEMA))


def _ledger_row(kind: str, run: pgsched.Run) -> tuple[Any, ...]:
    return (
        kind,
        run.job,
        run.scope.id,
        run.plan_time,
        run.attempt,
        run.execution_id,
        run.lease_token,
        run.fencing_token,
        run.runner_id,
        os.getpid(),
        datetime.fromtimestamp(time.time(), UTC),  # this replica's (possibly faked) clock
    )


def _notice(what: str, run: pgsched.Run) -> None:
    with psycopg.connect(DIRECT_DSN, autocommit=True, connect_timeout=10) as conn:
        conn.execute(
            NOTICE,
            (
                what,
                run.runner_id,
                os.getpid(),
                run.execution_id,
                run.lease_token,
                run.fencing_token,
            ),
        )


def _work(run: pgsched.Run) -> pgsched.Result:
    threading.Event().wait(random.uniform(WORK_MIN, WORK_MAX))
    try:
        run.heartbeat()
    except pgsched.LeaseLost:
        _notice("handler_told_lease_lost", run)  # and go on: the late write must be refused
    return pgsched.Result(
        rows_affected=1,
        data={
            "lease_token": str(run.lease_token),
            "fencing_token": run.fencing_token,
            "runner_id": run.runner_id,
            "pid": os.getpid(),
        },
    )


@scheduler.job(name="tx", transactional=True, **COMMON)
def tx(run: pgsched.Run) -> pgsched.Result:
    assert isinstance(run.conn, psycopg.Connection)
    run.conn.execute(LEDGER, _ledger_row("tx", run))
    return _work(run)


# Claimed before "tx" by every replica (replicas otherwise start their claim order at a place
# of their own): the mid-claim scenario cuts a replica off inside a "tx" claim while it holds
# the "plain" leases it has just claimed.
@scheduler.job(name="plain", priority=1, **COMMON)
def plain(run: pgsched.Run) -> pgsched.Result:
    with psycopg.connect(
        SIDE_DSN, autocommit=True, application_name=f"chaos-ledger {run.runner_id}"
    ) as conn:
        conn.execute(LEDGER, _ledger_row("plain", run))
    return _work(run)
