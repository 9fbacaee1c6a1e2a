"""Schedules as data against a model (Hypothesis state machine, real PostgreSQL): random
sequences of put, replace, pause, resume and delete between ticks of two replicas.

After every step:
- no plan ran twice (one handler call per (scope, plan));
- every claim was of the spec in force when it was claimed: a plan of that spec, of a live and
  unpaused schedule, never of a replaced or deleted one after the change committed;
- no due plan of a live schedule was lost: after a tick of a replica, every live, unpaused
  schedule's next plan lies after the instant the tick's claims began, and its latest plan
  before that instant (when later than the put) has run, or a later plan due by the time the
  tick ended superseded it (``latest_only``).

The model reads the database's clock, as the system does, and never assumes where the system's
own reads fell between two of its own: a claim decides at one database instant between the
tick's start and its end, so a plan that fell due in between may supersede the one the model
saw due at the start (a run at 20:00:27.99 may claim 20:00:28 instead of 20:00:27); and a
change takes effect at one instant between the model's reads before and after it, so a claim
in between may see either state, and a put just before a plan falls due may make that plan
the spec's first (a put at 07:16:11.99, read back at 07:16:12.12 on a loaded machine, may
run 07:16:12).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule
from psycopg import sql

import pgsched
from pgsched._planning.schedules import check_schedule, recurrence_for
from pgsched._structures import ScheduleSpec
from tests.integration.conftest import SchedulerFactory
from tests.support.models import DatabaseMachine, run_model
from tests.support.rows import db_now
from tests.support.threads import Recorder

JOB = "modelled"
VARIANTS = [
    {"every": "1s"},
    {"every": "2s"},
    {"every": "3s"},
    {"cron": "* * * * *", "timezone": "Asia/Kolkata"},
]
_US = timedelta(microseconds=1)


@dataclass
class Version:
    """One committed state of a schedule: its spec (None: deleted) and paused flag."""

    began: datetime  # the database time just before the change was made
    since: datetime  # the database time just after it committed
    spec: dict[str, Any] | None
    paused: bool = False


@dataclass
class Model:
    versions: dict[str, list[Version]] = field(default_factory=dict)

    def at(self, scope_id: str, t: datetime) -> list[Version | None]:
        """The versions that may be in force at ``t`` (None: before the first put): one, or
        two while a change was being made (between its ``began`` and ``since``)."""
        found: list[Version | None] = [None]
        for v in self.versions.get(scope_id, []):
            if v.since <= t:
                found = [v]
            elif v.began <= t:
                found = [found[-1], v]
        return found

    def current(self, scope_id: str) -> Version | None:
        versions = self.versions.get(scope_id)
        return versions[-1] if versions else None

    def spec_put(self, scope_id: str, version: Version) -> Version:
        """The version that put ``version``'s spec: pauses and resumes keep its plan times."""
        versions = self.versions[scope_id]
        i = versions.index(version)
        while i > 0 and versions[i - 1].spec == version.spec:
            i -= 1
        return versions[i]


def is_plan_of(spec: dict[str, Any], plan: datetime) -> bool:
    valid = check_schedule(JOB, ScheduleSpec(pgsched.Scope("m", "x"), **spec))
    return recurrence_for(valid.spec_key).next_after(plan - _US) == plan


class SchedulesMachine(DatabaseMachine):
    def __init__(self) -> None:
        super().__init__()
        self.kind = f"m{uuid.uuid4().hex[:8]}"
        self.recorder = Recorder()
        self.replicas = [self._replica(name) for name in ("ma", "mb")]
        self.model = Model()

    def _replica(self, name: str) -> Any:
        s = self.make_scheduler(name, tick_interval="0.2s")
        recorder = self.recorder

        def modelled(run: pgsched.Run) -> None:
            recorder.enter(run)
            recorder.leave()

        s.register(modelled, name=JOB, dynamic=True)
        return s

    def _scope(self, n: int) -> pgsched.Scope:
        return pgsched.Scope(self.kind, str(n))

    def _changed(self, n: int, began: datetime, spec: dict[str, Any] | None, paused: bool) -> None:
        now = db_now(self.db)
        self.model.versions.setdefault(str(n), []).append(Version(began, now, spec, paused))

    @rule(n=st.integers(0, 3), spec=st.sampled_from(VARIANTS), replica=st.integers(0, 1))
    def put(self, n: int, spec: dict[str, Any], replica: int) -> None:
        current = self.model.current(str(n))
        paused = current.paused if current is not None and current.spec is not None else False
        before = self.replicas[0].get_schedule(JOB, self._scope(n))
        put_from = db_now(self.db)
        put = self.replicas[replica].put_schedule(JOB, self._scope(n), paused=paused, **spec)
        put_until = db_now(self.db)
        same = current is not None and current.spec == spec
        if same:
            # An identical put leaves the plan times alone.
            assert before is not None and put.next_plan_time == before.next_plan_time
            return
        self._changed(n, put_from, spec, paused)
        # A new or replaced spec: its first occurrence strictly after the put.
        valid = check_schedule(JOB, ScheduleSpec(self._scope(n), **spec))
        planner = recurrence_for(valid.spec_key)
        assert put.next_plan_time is not None
        lo, hi = planner.next_after(put_from), planner.next_after(put_until)
        assert lo is not None and hi is not None
        assert lo <= put.next_plan_time <= hi, (put_from, put_until, put)

    @rule(n=st.integers(0, 3), replica=st.integers(0, 1))
    def delete(self, n: int, replica: int) -> None:
        current = self.model.current(str(n))
        live = current is not None and current.spec is not None
        began = db_now(self.db)
        assert self.replicas[replica].delete_schedule(JOB, self._scope(n)) is live
        if live:
            self._changed(n, began, None, False)

    @rule(n=st.integers(0, 3), paused=st.booleans())
    def pause_or_resume(self, n: int, paused: bool) -> None:
        current = self.model.current(str(n))
        action = self.replicas[0].pause_schedule if paused else self.replicas[0].resume_schedule
        if current is None or current.spec is None:
            with pytest.raises(pgsched.NotFoundError):
                action(JOB, self._scope(n))
            return
        began = db_now(self.db)
        action(JOB, self._scope(n))
        if current.paused != paused:
            self._changed(n, began, current.spec, paused)

    @rule(replica=st.integers(0, 1), wait=st.sampled_from([0.0, 0.6, 1.1]))
    def tick(self, replica: int, wait: float) -> None:
        if wait:
            time.sleep(wait)  # lets plans fall due between ticks; no check depends on its length
        began = db_now(self.db)
        self.replicas[replica].run_once()
        self._check_nothing_due_left(began, db_now(self.db))

    def _check_nothing_due_left(self, began: datetime, ended: datetime) -> None:
        runs = {(r.scope.id, r.plan_time) for r in self.recorder.runs}
        for scope_id in self.model.versions:
            current = self.model.current(scope_id)
            if current is None or current.spec is None or current.paused:
                continue
            stored = self.replicas[0].get_schedule(JOB, self._scope(int(scope_id)))
            assert stored is not None and stored.next_plan_time is not None
            assert stored.next_plan_time > began, (scope_id, began, stored)
            valid = check_schedule(JOB, ScheduleSpec(self._scope(0), **current.spec))
            latest = recurrence_for(valid.spec_key).latest_at_or_before(began)
            # Only a plan after the put committed must run (one before may not be the spec's).
            if latest is None or latest <= self.model.spec_put(scope_id, current).since:
                continue
            ran = (scope_id, latest) in runs or any(
                sid == scope_id and latest < plan <= ended for sid, plan in runs
            )
            assert ran, (scope_id, latest, began, ended, sorted(runs))

    @invariant()
    def each_plan_once_and_of_the_spec_in_force(self) -> None:
        keys = [(r.scope.id, r.plan_time) for r in self.recorder.runs]
        assert len(keys) == len(set(keys)), "a plan ran twice"
        claimed_at = self._claim_times()
        for run in self.recorder.runs:
            at = claimed_at[run.execution_id]
            candidates = self.model.at(run.scope.id, at)
            assert any(self._claimable(run, v) for v in candidates), (run, at, candidates)
            assert run.plan_time <= at, (run, at)  # never claimed before it fell due

    def _claimable(self, run: pgsched.Run, version: Version | None) -> bool:
        """Whether ``run`` is a claim of ``version``: live, unpaused, one of its spec's plans,
        and not before that spec was put (no replay)."""
        return (
            version is not None
            and version.spec is not None
            and not version.paused
            and is_plan_of(version.spec, run.plan_time)
            and run.plan_time > self.model.spec_put(run.scope.id, version).began
        )

    def _claim_times(self) -> dict[Any, datetime]:
        query = sql.SQL("SELECT id, started_at FROM {} WHERE job_name = %s").format(
            sql.Identifier(self.schema, "cron_executions")
        )
        return {row[0]: row[1] for row in self.db.execute(query, (JOB,)).fetchall()}

    def teardown(self) -> None:
        for n in range(4):
            self.replicas[0].delete_schedule(JOB, self._scope(n))


def test_schedules_follow_the_model(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    run_model(
        SchedulesMachine,
        examples=10,
        steps=16,
        make_scheduler=make_scheduler,
        db=db,
        schema=migrated,
    )
