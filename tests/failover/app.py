"""The APP the failover scenarios run under ``pgsched run`` (two replicas): ``work``, a
non-transactional ``every_plan`` job whose handler records each execution in a table of a
separate PostgreSQL that no failover touches (``FO_SIDE_DSN``, schema ``FO_SIDE_SCHEMA``), so
re-runs can be counted; and ``tx``, a ``transactional=True`` job whose effect is a row written
through ``run.conn`` into ``FO_SCHEMA.tx_effects`` of the cluster itself (committed with its
SUCCESS row, or not at all); it notes each invocation on the side server too."""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg
from psycopg import sql

import pgsched

SIDE_DSN = os.environ["FO_SIDE_DSN"]
SIDE = sql.Identifier(os.environ["FO_SIDE_SCHEMA"])
CLUSTER = sql.Identifier(os.environ["FO_SCHEMA"])
WORK_SCOPES = int(os.environ.get("FO_WORK_SCOPES", "3"))
TX_SCOPES = int(os.environ.get("FO_TX_SCOPES", "2"))

scheduler = pgsched.Scheduler(tick_interval="0.2s", max_concurrency=16, shutdown_grace="3s")
COMMON: dict[str, Any] = dict(
    every="1s",
    catch_up="every_plan",
    max_plans_per_tick=5,
    run_timeout="3s",
    stale_timeout=os.environ.get("FO_STALE_TIMEOUT", "4s"),
    heartbeat_interval="1s",
    max_attempts=3,
    retry_backoff=["1s"],
    allow_stale_reentry=True,  # work too: a run cut off by the fault is run again
)


def record(run: pgsched.Run, kind: str) -> None:
    """One row on the side server: this execution of ``run`` happened (``kind``)."""
    with psycopg.connect(SIDE_DSN, autocommit=True, connect_timeout=5) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {}.effects (kind, scope, plan_time, runner, execution_id, attempt,"
                " fencing) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            ).format(SIDE),
            (
                kind,
                run.scope.id,
                run.plan_time,
                run.runner_id,
                run.execution_id,
                run.attempt,
                run.fencing_token,
            ),
        )


@scheduler.job(scopes=[pgsched.Scope("shard", str(i)) for i in range(WORK_SCOPES)], **COMMON)
def work(run: pgsched.Run) -> int:
    time.sleep(0.3)  # some runs are in flight at the fault
    record(run, "work")
    return 1


@scheduler.job(
    scopes=[pgsched.Scope("shard", str(i)) for i in range(TX_SCOPES)], transactional=True, **COMMON
)
def tx(run: pgsched.Run) -> int:
    record(run, "tx_seen")
    time.sleep(0.2)
    assert isinstance(run.conn, psycopg.Connection)
    run.conn.execute(
        sql.SQL(
            "INSERT INTO {}.tx_effects (scope, plan_time, runner, execution_id, fencing)"
            " VALUES (%s, %s, %s, %s, %s)"
        ).format(CLUSTER),
        (run.scope.id, run.plan_time, run.runner_id, run.execution_id, run.fencing_token),
    )
    return 1
