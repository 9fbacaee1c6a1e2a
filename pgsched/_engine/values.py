"""The engine's value types, in one module so that its collaborators import each other's
values without importing each other: a claim (what was won), a lease (what this replica
holds), an outcome (how a run ended) and the tick report.
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, NamedTuple
from uuid import UUID

from .._jobs.spec import JobSpec
from .._records import Finish, WonPlan
from .._run import Liveness, Run
from .._structures import Scope, Trigger, trusted_scope

ClaimKind = Literal["won", "stole", "retry"]


class Claim(NamedTuple):
    """A row this replica now holds with a fresh lease."""

    kind: ClaimKind
    execution_id: UUID
    scope: Scope
    plan_time: datetime
    trigger: Trigger
    attempt: int
    max_attempts: int
    lease_token: UUID
    fencing_token: int
    started_at: datetime | None
    previous_runner: str | None = None
    payload: dict[str, Any] | None = None  # the schedule's payload (dynamic jobs)
    stolen: bool = False  # the row was once stolen after a crash: one more attempt is allowed

    @classmethod
    def first(cls, plan: WonPlan, max_attempts: int, scope: Scope | None) -> Claim:
        """The claim of a plan won from its due cursor or schedule: a first scheduled
        attempt, of ``scope`` (the job's own object) or one rebuilt from the row's key."""
        return cls(
            kind="won",
            execution_id=plan.id,
            scope=scope or trusted_scope(plan.scope_kind, plan.scope_id),
            plan_time=plan.plan_time,
            trigger="schedule",
            attempt=1,
            max_attempts=max_attempts,
            lease_token=plan.lease_token,
            fencing_token=plan.fencing_token,
            started_at=plan.started_at,
            payload=plan.payload,
        )


class Unmoved(Exception):
    """A claim found cursors (schedules) elsewhere than where it read them: rolled back."""


@dataclass
class Claimed:
    """What one claim transaction got."""

    claims: list[Claim] = field(default_factory=list)
    again: bool = False  # a claim of due cursors was full: claim again at once
    backlog: bool = False  # work was left for want of slots
    # Plans the claim's decisions passed over, by reason (superseded, max_lateness, paused,
    # outside_window), and plans it wanted but another claim had: counted once the
    # transaction commits, as the claims are (one rolled back is decided again, and would
    # otherwise be counted twice).
    skipped: dict[str, int] = field(default_factory=dict)
    conflicts: int = 0
    closed: list[dict[str, Any]] = field(default_factory=list)  # stale leases closed FAILED


class LeaseState(enum.Enum):
    """Whose outcome ends a lease's execution. Being done (its slot free) is kept apart, in
    the lease's event: a lost lease is done with no outcome, and an abandoned one must still
    read abandoned once done, or a handler that outlived its cancellation would be written
    twice."""

    CLAIMED = "claimed"  # no outcome yet: its handler waits or runs
    SUBMITTED = "submitted"  # its handler's outcome is with the writer
    ABANDONED = "abandoned"  # shutdown's outcome is with the writer; the handler's is dropped


@dataclass(eq=False, slots=True)
class BatchSlot:
    """The one handler slot the leases of a batch share: free once each is released."""

    held: int


@dataclass(eq=False, slots=True, weakref_slot=True)
class Lease:
    """One execution this replica claimed, from its claim until its outcome is written. Its
    lifecycle is its own: the collaborators say what happened (:meth:`submit`,
    :meth:`abandon`, :meth:`finish`, :meth:`renewed`) and read where it stands."""

    job: JobSpec
    run: Run
    liveness: Liveness
    execution_id: UUID  # the run's, kept here: every write and settle reads it
    claim_lag: float | None = None  # seconds late at claim, for first scheduled attempts
    started_at: datetime | None = None  # the claim's database time (re-applied after a failover)
    kind: str = "won"  # how it was claimed: won, stole, retry
    stolen: bool = False  # the row was once stolen after a crash (its retries have one more)
    claimed_at: float = field(default_factory=time.monotonic)
    task: asyncio.Task[Any] | None = None  # its handler's (a batch's leases share one)
    slot: BatchSlot | None = None  # a batch's leases share a slot; None: a slot of its own
    _next_beat: float = field(init=False)
    _state: LeaseState = field(default=LeaseState.CLAIMED, init=False)
    _previous: Lease | None = field(default=None, init=False)
    # Done (its slot free), and who waits for that: a future per waiter, made only when one
    # waits (an asyncio.Event per lease cost a kilobyte for each of a fan-out's leases).
    _done: bool = field(default=False, init=False)
    _waiters: list[asyncio.Future[None]] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._next_beat = self.claimed_at + self.job.heartbeat_interval.total_seconds()

    # -- what happened ----------------------------------------------------------------------

    def chain_after(self, previous: Lease | None) -> None:
        """overlap="forbid": the scope's earlier plan, still held here, runs first."""
        self._previous = previous

    def submit(self) -> None:
        """Its outcome is queued for (or being retried by) the writer; an abandoned lease's
        is shutdown's, and it stays abandoned."""
        if self._state is LeaseState.CLAIMED:
            self._state = LeaseState.SUBMITTED

    def abandon(self) -> None:
        """Shutdown writes its outcome (submitted at once, by ``Executor.abandon``): the
        handler's, if any, is dropped."""
        self._state = LeaseState.ABANDONED

    def finish(self) -> None:
        """Its slot is free: its outcome is written, or it was lost. Idempotent."""
        if self._done:
            return
        self._done = True
        for waiter in self._waiters or ():
            if not waiter.done():
                waiter.set_result(None)
        self._waiters = None

    def renewed(self, now: float) -> None:
        """A heartbeat renewed it at ``now`` (monotonic): the next is one interval on."""
        self._next_beat = now + self.job.heartbeat_interval.total_seconds()

    # -- where it stands --------------------------------------------------------------------

    @property
    def previous(self) -> Lease | None:
        return self._previous

    @property
    def state(self) -> LeaseState:
        return self._state

    @property
    def abandoned(self) -> bool:
        return self._state is LeaseState.ABANDONED

    @property
    def submitted(self) -> bool:
        """An outcome is with the writer: the handler's, or shutdown's."""
        return self._state is not LeaseState.CLAIMED

    @property
    def done(self) -> bool:
        return self._done

    @property
    def decided(self) -> bool:
        """Its outcome is settled: queued, written by shutdown, or its slot already free."""
        return self._state is not LeaseState.CLAIMED or self._done

    @property
    def next_beat(self) -> float:
        return self._next_beat

    def beat_due(self, now: float) -> bool:
        """Whether a heartbeat should renew it at ``now``: due, and still the replica's."""
        return now >= self._next_beat and not self.abandoned and not self.liveness.known_lost

    async def wait_done(self) -> None:
        if self._done:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._waiters is None:
            self._waiters = []
        self._waiters.append(waiter)
        await waiter


Status = Literal["SUCCESS", "FAILED"]


class Outcome(NamedTuple):
    """The terminal write of one execution (before its lease token guards it)."""

    status: Status
    duration_ms: int
    error_code: str | None = None
    error_msg: str | None = None
    rows_affected: int | None = None
    result_json: str | None = None
    retry_delay_s: float | None = None  # FAILED: the delay before the next attempt, if any
    traceback: str | None = None  # FAILED by an exception: the handler's, at most 16 KiB
    error: BaseException | None = None  # FAILED by an exception: it, for on_failure

    def finish(self, run: Run) -> Finish:
        """The row write for ``run``, guarded by its lease token."""
        return Finish(
            run.execution_id,
            run.lease_token,
            run.plan_time,
            self.status,
            self.error_code,
            self.error_msg,
            self.rows_affected,
            self.result_json,
            self.duration_ms,
            self.retry_delay_s,
            self.traceback,
        )
