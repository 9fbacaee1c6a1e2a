"""Batch handlers against a model (Hypothesis state machine, real PostgreSQL): two replicas
of one slot each, with different batch sizes, tick a job of seven scopes (a scheduled plan
each, and one-off runs triggered beside it, which may share its batch) whose runs succeed,
fail or are left
unmarked as drawn, whose batches raise as drawn, and whose replicas stall mid-batch while the
other steals their runs (a crash as the ledger sees it: a holder that stopped heartbeating).

After every step:
- no plan ran twice: a SUCCESS row's outcome is the one success its handler reported under
  that row's lease token (a stalled replica's late outcome never lands);
- every run's outcome is the one drawn: a SUCCESS row was marked succeeded or left unmarked in
  a batch that returned; a FAILED row was marked failed, or left unmarked in a batch that
  raised;
- no RUNNING row is left but a stalled replica's, and fencing tokens grow with every claim.

At the end, none lost: ticking on, every plan ends SUCCESS or FAILED with no attempt left.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import invariant, rule
from psycopg import sql
from psycopg.rows import dict_row

import pgsched
from tests.integration.conftest import SchedulerFactory
from tests.support.models import DatabaseMachine, run_model
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import table
from tests.support.waiting import wait_until

SCOPES = 7
MAX_ATTEMPTS = 3
FATES = ("succeed", "fail", "unmarked")
RAISED = "RuntimeError: the batch raised"


@dataclass(frozen=True)
class Reported:
    """One run as its handler saw it, and the row it must have left: its status and error."""

    scope: str
    plan_time: datetime
    lease_token: uuid.UUID
    fencing_token: int
    status: str
    error: str | None


class BatchesMachine(DatabaseMachine):
    def __init__(self) -> None:
        super().__init__()
        self.job = f"b{uuid.uuid4().hex[:8]}"
        self.fates: dict[tuple[str, int], str] = {}
        self.raising = False
        self.stall: threading.Event | None = None  # set: the stalled handler goes on
        self.stalled = threading.Event()  # the stalled handler has its batch
        self.stall_victim = ""  # the runner_id of the replica that stalls
        self.lock = threading.Lock()
        self.reported: list[Reported] = []
        self.fencing: dict[str, int] = {}
        self.triggered: set[uuid.UUID] = set()
        plans = FixedPlans(past_plan(self.db))
        self.replicas = [self._replica(name, size, plans) for name, size in (("ba", 2), ("bb", 3))]

    def _replica(self, name: str, size: int, plans: FixedPlans) -> pgsched.Scheduler:
        # One slot: a tick runs one batch, so batches of both replicas interleave.
        s: pgsched.Scheduler = self.make_scheduler(
            f"{name}-{self.job}", tick_interval="0.2s", max_concurrency=1
        )

        def handler(batch: pgsched.Batch) -> None:
            stall = self.stall
            if stall is not None and batch[0].runner_id == self.stall_victim:
                self.stalled.set()
                assert stall.wait(30)
            raising = self.raising
            for run in batch:
                fate = self.fates.get((run.scope.id, run.attempt), "unmarked")
                if fate == "succeed":
                    run.succeed()
                elif fate == "fail":
                    run.fail("drawn to fail")
                if fate == "fail":
                    self._report(run, "FAILED", "drawn to fail")
                elif fate == "unmarked" and raising:
                    self._report(run, "FAILED", RAISED)
                else:
                    self._report(run, "SUCCESS", None)
            if raising:
                raise RuntimeError("the batch raised")

        s.register(
            handler,
            name=self.job,
            planner=plans,
            scopes=[pgsched.Scope("m", str(i)) for i in range(SCOPES)],
            batch_size=size,
            max_attempts=MAX_ATTEMPTS,
            retry_backoff=[],
            allow_stale_reentry=True,
            run_timeout="1m",
            stale_timeout="2m",
            heartbeat_interval="30s",
        )
        return s

    def _report(self, run: pgsched.Run, status: str, error: str | None) -> None:
        with self.lock:
            self.reported.append(
                Reported(
                    run.scope.id, run.plan_time, run.lease_token, run.fencing_token, status, error
                )
            )

    def _rows(self) -> list[dict[str, Any]]:
        query = sql.SQL(
            "SELECT id, scope_id, plan_time, status, lease_token, fencing_token, error_msg,"
            " next_retry_at FROM {} WHERE job_name = %s"
        ).format(table(self.schema))
        with self.db.cursor(row_factory=dict_row) as cur:
            found: list[dict[str, Any]] = cur.execute(query, (self.job,)).fetchall()
            return found

    @rule(
        scope=st.integers(0, SCOPES - 1),
        attempt=st.integers(1, MAX_ATTEMPTS + 1),
        fate=st.sampled_from(FATES),
    )
    def draw(self, scope: int, attempt: int, fate: str) -> None:
        self.fates[str(scope), attempt] = fate

    @rule(scope=st.integers(0, SCOPES - 1))
    def trigger(self, scope: int) -> None:
        """A one-off run of the scope now, beside its scheduled plan (maybe in its batch)."""
        made = self.replicas[0].admin.trigger(self.job, pgsched.Scope("m", str(scope)))
        if made.id is not None:
            self.triggered.add(made.id)

    @rule(replica=st.integers(0, 1), raises=st.booleans())
    def tick(self, replica: int, raises: bool) -> None:
        self.raising = raises
        try:
            self.replicas[replica].run_once()
        finally:
            self.raising = False

    @rule(victim=st.integers(0, 1))
    def stall_and_steal(self, victim: int) -> None:
        """The victim claims a batch and stops (no heartbeat); once its leases are stale the
        other replica steals and runs them; then the victim wakes and its outcome is
        refused."""
        self.stall, self.stalled = threading.Event(), threading.Event()
        self.stall_victim = self.replicas[victim].runner_id
        done = threading.Event()

        def victim_tick() -> None:
            try:
                self.replicas[victim].run_once()
            finally:
                done.set()

        thread = threading.Thread(target=victim_tick, daemon=True)
        thread.start()
        try:
            wait_until(lambda: self.stalled.is_set() or done.is_set(), 20, "the victim's tick")
            if not self.stalled.is_set():  # nothing was due for the victim
                event("stall: nothing due")
                return
            event("stall: stolen")
            held = sql.SQL(
                "UPDATE {} SET stale_after = clock_timestamp() - interval '1 second'"
                " WHERE job_name = %s AND status = 'RUNNING' AND runner_id = %s"
            ).format(table(self.schema))
            self.db.execute(held, (self.job, self.stall_victim))
            self.replicas[1 - victim].run_once()
        finally:
            self.stall.set()
            assert done.wait(30)
            thread.join(5)
            self.stall = None

    @invariant()
    def ledger_matches_the_reports(self) -> None:
        with self.lock:
            reported = list(self.reported)
        by_token = {(r.scope, r.plan_time, r.lease_token): r for r in reported}
        for row in self._rows():
            assert row["status"] != "RUNNING", row  # every tick ran to its end
            if row["status"] == "PENDING":  # triggered, not claimed yet
                assert row["id"] in self.triggered, row
                continue
            plan = (row["scope_id"], row["plan_time"])
            mine = [r for r in reported if (r.scope, r.plan_time) == plan]
            assert mine, row  # every row that ended was seen by a handler
            assert row["fencing_token"] == max(r.fencing_token for r in mine), row
            tokens = [r.fencing_token for r in mine]
            assert len(tokens) == len(set(tokens)), mine  # a claim's token is never reused
            last = by_token.get((*plan, row["lease_token"]))
            assert last is not None, row  # the row's outcome is its last holder's
            assert (row["status"], row["error_msg"]) == (last.status, last.error), (row, last)

    def teardown(self) -> None:
        """None lost: the plans still retrying end, each SUCCESS or out of attempts."""

        def settled() -> bool:
            found = self._rows()
            ids = {r["id"] for r in found}
            if len(found) >= SCOPES and self.triggered <= ids and all(_ended(r) for r in found):
                return True
            for s in self.replicas:
                s.run_once()
            return False

        try:
            wait_until(settled, 60, "every plan to end", interval=0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {self._rows()}") from None
        self.ledger_matches_the_reports()


def _ended(row: dict[str, Any]) -> bool:
    return row["status"] == "SUCCESS" or (
        row["status"] == "FAILED" and row["next_retry_at"] is None
    )


def test_batches_follow_the_model(make_scheduler: SchedulerFactory, migrated: str, db: Any) -> None:
    run_model(
        BatchesMachine,
        examples=15,
        steps=12,
        make_scheduler=make_scheduler,
        db=db,
        schema=migrated,
    )
