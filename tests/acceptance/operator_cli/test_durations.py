"""The command line writes a duration one way, as durations are written in input (``1m30s``):
``schedules list``, ``schedules get`` and ``status`` alike (``--json`` keeps seconds)."""

from __future__ import annotations

import json

import pytest

import pgsched
from tests.acceptance.operator_cli.ops import Ops, parse_table

pytestmark = pytest.mark.acceptance


def _ok(run: pgsched.Run) -> None:
    return None


def test_durations_are_written_as_in_input(bare_ops: Ops) -> None:
    ops = bare_ops
    s = pgsched.Scheduler(dsn=ops.dsn, schema=ops.schema, runner_id="registrar")
    s.register(_ok, name="reminder", dynamic=True)
    s.register(_ok, name="slow", every="90m")
    s.run_once()  # registers both jobs as a replica does
    with pgsched.Admin(dsn=ops.dsn, schema=ops.schema) as admin:
        admin.put_schedule("reminder", pgsched.Scope("user", "1"), every="90s")

    listed = parse_table(ops.ok("schedules", "list", "reminder"))
    assert listed[0]["SCHEDULE"] == "every 1m30s", listed
    got = ops.ok("schedules", "get", "reminder", "user:1").splitlines()
    assert "every: 1m30s" in got, got
    assert json.loads(ops.ok("schedules", "get", "reminder", "user:1", "--json"))["every"] == 90
    status = {r["JOB"]: r for r in parse_table(ops.ok("status"))}
    assert status["slow"]["SCHEDULE"] == "every 1h30m", status
