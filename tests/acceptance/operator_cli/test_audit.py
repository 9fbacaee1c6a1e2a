"""The command line's actions land in the action log the dashboard shows (surface ``cli``,
the OS user and host of the command), through real ``python -m pgsched`` subprocesses."""

from __future__ import annotations

import getpass
import socket
from datetime import UTC, datetime

import pytest
from psycopg import sql
from psycopg.rows import dict_row

from tests.acceptance.operator_cli.ops import Ops, trigger
from tests.support.rows import table

pytestmark = pytest.mark.acceptance


def test_cli_actions_are_recorded_with_the_os_user(ops: Ops) -> None:
    ops.ok("pause", "hourly")
    ops.ok("resume", "hourly")
    # half past: 09:00 is a scheduled plan of the hourly job, which a trigger never takes
    ident = trigger(ops, "per_tenant", "--scope", "tenant:a", "--at", "2030-01-01T09:30:00Z")
    ops.ok("cancel", str(ident))
    assert ops("pause", "no_such_job").returncode == 1

    with ops.db.cursor(row_factory=dict_row) as cur:
        cur.execute(sql.SQL("SELECT * FROM {} ORDER BY id").format(table(ops.schema, "actions")))
        log = cur.fetchall()
    who = f"{getpass.getuser()}@{socket.gethostname()}"
    assert [(r["surface"], r["actor"], r["action"], r["job_name"], r["outcome"]) for r in log] == [
        ("cli", who, "pause", "hourly", "ok"),
        ("cli", who, "resume", "hourly", "ok"),
        ("cli", who, "trigger", "per_tenant", "ok"),
        ("cli", who, "cancel", "per_tenant", "ok"),
        ("cli", who, "pause", "no_such_job", "error"),
    ]
    triggered = log[2]
    assert (triggered["scope"], triggered["execution_id"]) == ("tenant:a", ident)
    assert triggered["details"]["at"] == datetime(2030, 1, 1, 9, 30, tzinfo=UTC).isoformat()
    assert log[3]["execution_id"] == ident
