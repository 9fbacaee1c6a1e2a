"""``pgsched trigger`` as the user of issue 22 met it (real ``python -m pgsched``
subprocesses, no APP): a future ``--at`` never swallows a run-now, a second trigger says
which execution already holds the plan, an ended plan is refused, a scoped job needs
``--scope`` (one it has) or ``--all-scopes``, and ``pgsched status`` shows the job's last
scheduled or started plan, not a cancelled trigger ahead of it."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest

import pgsched
from tests.acceptance.operator_cli.ops import (
    Ops,
    assert_one_line_error,
    current_plan,
    trigger,
)
from tests.support.rows import count, row_by_id

pytestmark = pytest.mark.acceptance

FAR = datetime(2031, 1, 1, tzinfo=UTC)
ONE_OFF = "2031-01-01T00:30:00"  # between two of hourly's plans


def test_future_at_never_swallows_a_run_now(ops: Ops) -> None:
    db, schema = ops.db, ops.schema
    later = trigger(ops, "hourly", "--at", ONE_OFF)
    now = trigger(ops, "hourly")
    assert now != later, "the run-now is queued next to the one-off of 2031"
    assert row_by_id(db, schema, now)["plan_time"] < FAR

    again = ops.ok("trigger", "hourly", "--at", ONE_OFF)
    assert again.startswith(str(later)), again
    assert "not created" in again and "PENDING" in again and "2031-01-01 00:30:00" in again
    held = ops.ok("trigger", "hourly")
    assert held.startswith(str(now)) and "not created" in held, held
    assert count(db, schema, "job_name = 'hourly' AND trigger = 'manual'") == 2

    ops.ok("cancel", str(later))
    line = assert_one_line_error(
        ops("trigger", "hourly", "--at", ONE_OFF), "already ended", "CANCELLED"
    )
    assert str(later) in line
    assert count(db, schema, "job_name = 'hourly' AND trigger = 'manual'") == 2


def test_status_shows_the_last_scheduled_plan_not_a_cancelled_trigger(ops: Ops) -> None:
    scheduled = current_plan(ops)
    later = trigger(ops, "hourly", "--at", ONE_OFF)
    ops.ok("cancel", str(later))
    jobs = {j["job"]: j for j in json.loads(ops.ok("status", "--json"))["jobs"]}
    hourly = jobs["hourly"]
    assert datetime.fromisoformat(hourly["last_plan"]) == scheduled["plan_time"], hourly
    assert hourly["last_status"] == "SUCCESS", hourly
    table = ops.ok("status")
    assert "2031" not in table and "CANCELLED" not in table, table


def test_a_scoped_job_needs_a_scope_it_has(ops: Ops) -> None:
    db, schema = ops.db, ops.schema
    before = count(db, schema)
    line = assert_one_line_error(
        ops("trigger", "per_tenant"), "'per_tenant'", "--all-scopes", "--scope KIND:ID"
    )
    assert "all_scopes" not in line and "=" not in line, "the CLI names its own options"
    assert_one_line_error(
        ops("trigger", "per_tenant", "--scope", "tenant:nobody"), "'per_tenant'", "tenant:nobody"
    )
    assert_one_line_error(ops("trigger", "hourly", "--scope", "tenant:a"), "'hourly'")
    assert count(db, schema) == before, "a refused trigger queues nothing"
    assert count(db, schema, "scope_kind = 'global' AND job_name = 'per_tenant'") == 0

    out = ops.ok("trigger", "per_tenant", "--all-scopes").splitlines()
    assert len(out) == 2, out
    scopes = {}
    for line in out:
        ident, scope = line.split()[:2]
        scopes[scope] = row_by_id(db, schema, uuid.UUID(ident))
    assert set(scopes) == {"tenant:a", "tenant:b"}
    for scope, row in scopes.items():
        assert f"{row['scope_kind']}:{row['scope_id']}" == scope
        assert (row["status"], row["trigger"]) == ("PENDING", "manual")
    held = ops.ok("trigger", "per_tenant", "--scope", "tenant:a")
    assert held.startswith(str(scopes["tenant:a"]["id"])) and "not created" in held, held


def test_a_one_off_at_a_scheduled_plan_adds_nothing_and_says_so(ops: Ops) -> None:
    db, schema = ops.db, ops.schema
    before = count(db, schema)
    done = ops("trigger", "hourly", "--at", "2031-01-01T00:00:00")  # one of hourly's plans
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout.startswith("-  not created: 2031-01-01 00:00:00 is a scheduled plan"), done
    assert "runs anyway" in done.stdout and done.stdout.count("\n") == 1, done.stdout
    assert count(db, schema) == before, "the scheduled run covers it: nothing was added"

    every = ops("trigger", "per_tenant", "--all-scopes", "--at", "2031-01-01T00:00:00")
    assert every.returncode == 0 and every.stdout.count("scheduled plan") == 2, every.stdout

    # a plan that ran: its execution is the answer, and it is no error
    ran = current_plan(ops)
    at = ran["plan_time"].isoformat()
    shown = ops("trigger", "hourly", "--at", at)
    assert shown.returncode == 0, (shown.stdout, shown.stderr)
    assert shown.stdout.startswith(str(ran["id"])) and "SUCCESS" in shown.stdout, shown.stdout
    assert count(db, schema) == before


def test_an_accepted_trigger_warns_on_stderr(ops: Ops) -> None:
    # the registrar that registered the jobs stopped: no live replica runs them
    alone = ops("trigger", "hourly")
    assert alone.returncode == 0, alone.stderr
    uuid.UUID(alone.stdout.strip())  # stdout is still the id alone, as scripts read it
    assert "pgsched: warning: job 'hourly': no live replica runs it" in alone.stderr, alone
    past = ops("trigger", "hourly", "--at", "2020-01-01T00:30:00")
    assert past.returncode == 0, past.stderr
    assert "job 'hourly': 2020-01-01T00:30:00+00:00 is in the past" in past.stderr, past.stderr
    assert "Traceback" not in alone.stderr + past.stderr


def test_a_pending_trigger_shows_the_jobs_max_attempts(bare_ops: Ops) -> None:
    ops = bare_ops
    s = pgsched.Scheduler(dsn=ops.dsn, schema=ops.schema, runner_id="registrar")
    s.register(lambda run: None, name="twice", every="1h", max_attempts=2)
    s.run_once()  # registers the job, with its max_attempts, as a replica does
    ident = trigger(ops, "twice")  # an operator without the job's code
    line = next(x for x in ops.ok("runs", "--job", "twice").splitlines() if str(ident) in x)
    assert "PENDING" in line and " 1/2 " in line, line
    shown = ops.ok("runs", "show", str(ident))
    assert "attempt:     1/2" in shown, shown
