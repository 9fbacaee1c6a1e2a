"""What a trigger checks before it touches the database: a job's scopes as its code declares
them (``scopes_mode``), a scope or ``all_scopes`` but not both, a scoped job's missing scope,
the ended-plan error, and the command line's line for a trigger that queued nothing."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest

import pgsched
from pgsched import GLOBAL, Scope
from pgsched._cli.common import cli_field
from pgsched._cli.main import _triggered_line
from pgsched._errors import FieldError
from pgsched._facades.http.server import api_field
from pgsched._jobs.spec import build_job, scopes_mode
from pgsched._operations.triggers import (
    ScheduledPlans,
    Triggering,
    TriggerScopes,
    check_not_ended,
)
from pgsched._records import JobRecord
from pgsched._storage.schedules import ScheduleStore
from pgsched._storage.store import Store
from pgsched._structures import Triggered
from tests.support.plans import FixedPlans

AT = datetime(2031, 1, 1, tzinfo=UTC)
TENANTS = [Scope("tenant", "acme"), Scope("tenant", "beta")]


def _noop(run: pgsched.Run) -> None:
    return None


def _scopes(**options: Any) -> TriggerScopes:
    spec = build_job(_noop, name="berlin_report", every="1h", **options)
    # These paths decide from the job's code alone: no connection is ever used.
    return TriggerScopes(Store("pgsched"), cast(Any, None), "berlin_report", spec)


def _resolve(scopes: TriggerScopes, scope: Any, every: Any) -> list[Scope]:
    return asyncio.run(scopes.resolve(scope, every))


def _triggered(created: bool, status: str = "PENDING") -> Triggered:
    return Triggered(uuid.uuid4(), AT, status, created, "tenant", "acme")


def test_scopes_mode_names_what_a_job_runs_for() -> None:
    plain = build_job(_noop, name="a", every="1h")
    listed = build_job(_noop, name="b", every="1h", scopes=TENANTS)
    computed = build_job(_noop, name="c", every="1h", scopes=lambda now: TENANTS)
    dynamic = build_job(_noop, name="d", dynamic=True)
    assert [scopes_mode(j) for j in (plain, listed, computed, dynamic)] == [
        "global",
        "static",
        "callable",
        "dynamic",
    ]


def test_a_global_job_takes_no_scope_or_global() -> None:
    assert _resolve(_scopes(), None, False) == [GLOBAL]
    assert _resolve(_scopes(), GLOBAL, False) == [GLOBAL]
    assert _resolve(_scopes(), None, True) == [GLOBAL]
    with pytest.raises(pgsched.ConfigError, match=r"'berlin_report': scope tenant:acme"):
        _resolve(_scopes(), TENANTS[0], False)


def test_a_scoped_job_needs_a_scope_or_all_scopes() -> None:
    with pytest.raises(pgsched.ConfigError, match=r"'berlin_report' runs for the scopes"):
        _resolve(_scopes(scopes=TENANTS), None, False)
    with pytest.raises(pgsched.ConfigError, match="not both"):
        _resolve(_scopes(scopes=TENANTS), TENANTS[0], True)


def test_each_surface_names_the_fields_its_own_way() -> None:
    """The error carries the fields; the Python API, the CLI and the HTTP API word them."""
    with pytest.raises(FieldError) as raised:
        _resolve(_scopes(scopes=TENANTS), None, False)
    python, cli, api = (
        str(raised.value),
        raised.value.worded(cli_field),
        raised.value.worded(api_field),
    )
    assert "all_scopes=True" in python and "scope=Scope(" in python and "--" not in python
    assert "--all-scopes" in cli and "--scope KIND:ID" in cli and "all_scopes" not in cli
    assert '"all_scopes": true' in api and '"scope": "KIND:ID"' in api and "--" not in api
    assert "=" not in api


@pytest.mark.parametrize(
    ("scope", "every", "needle"),
    [("tenant:acme", False, "pgsched.Scope"), (None, "yes", "all_scopes='yes'")],
)
def test_wrong_types_are_named(scope: Any, every: Any, needle: str) -> None:
    with pytest.raises(pgsched.ConfigError, match=needle):
        _resolve(_scopes(), scope, every)


@pytest.mark.parametrize("status", ["SUCCESS", "FAILED", "CANCELLED"])
def test_an_explicit_at_whose_plan_ended_is_an_error(status: str) -> None:
    row = _triggered(False, status)
    with pytest.raises(pgsched.PgschedError, match=f"already ended.*{row.id}.*{status}"):
        check_not_ended("flaky_sync", AT, [row])
    check_not_ended("flaky_sync", None, [row])  # a run-now is never about an ended plan
    check_not_ended("flaky_sync", AT, [_triggered(False, "PENDING"), _triggered(True)])


def test_the_cli_line_says_which_execution_holds_the_plan() -> None:
    made = _triggered(True)
    assert _triggered_line(made, with_scope=False) == str(made.id)
    assert _triggered_line(made, with_scope=True) == f"{made.id}  tenant:acme"
    held = _triggered(False, "RUNNING")
    line = _triggered_line(held, with_scope=False)
    assert line.startswith(str(held.id)) and "not created" in line and "RUNNING" in line
    assert "2031-01-01 00:00:00" in line


@pytest.mark.parametrize(
    ("options", "expected_us"),
    [
        ({"every": timedelta(microseconds=2)}, 1),  # now is a plan: the next microsecond
        ({"planner": "fixed"}, 2),  # now and the next microsecond are plans
        ({"every": "1h"}, 0),  # now is no plan: the run-now is planned at now
    ],
)
def test_a_run_now_is_planned_off_every_scheduled_plan(
    options: dict[str, Any], expected_us: int
) -> None:
    """A run-now planned exactly at a scheduled plan would take the key the plan's claim
    needs: it moves off it by a microsecond at a time (decided from the job's code alone)."""
    now = datetime(2031, 1, 1, 0, 0, 0, 2, tzinfo=UTC) if "planner" not in options else AT
    if options.get("planner") == "fixed":
        options = {"planner": FixedPlans(AT, AT + timedelta(microseconds=1))}
    spec = build_job(_noop, name="tick", **options)
    record = JobRecord(True, "global", None, None, None, None, True, now)
    trigger = Triggering(Store("pgsched"), ScheduleStore("pgsched"), cast(Any, None), "tick", spec)
    plans = ScheduledPlans(trigger, record)
    planned = asyncio.run(plans.off_plan(GLOBAL, now))
    assert planned == now + timedelta(microseconds=expected_us)
