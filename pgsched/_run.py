"""The handler's view of one execution (:class:`Run`) and whether its lease still holds
(:class:`Liveness`, set by the engine's lease table)."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
from structlog.typing import FilteringBoundLogger

from ._errors import LeaseLost
from ._structures import Scope, Trigger

# Given a job's name, the transaction its sync transactional runs share with whatever else
# writes through that connection (Django's ORM): a block that yields the connection, commits
# when it ends cleanly and rolls back when it raises. None: a connection of the run's own.
RunTransaction = Callable[[str], AbstractContextManager[psycopg.Connection[Any]]]


class Liveness:
    """Whether the replica still holds a run's lease: lost once a renewal or write matched no
    row, or once no renewal succeeded for a whole ``stale_timeout`` (another replica may then
    legitimately have stolen it). Owned by the replica's lease table."""

    __slots__ = ("_lost", "_renewed_at", "_stale_timeout_s")

    def __init__(self, stale_timeout_s: float = 0.0) -> None:
        self._stale_timeout_s = stale_timeout_s
        self._renewed_at = time.monotonic()
        self._lost = False

    @property
    def lost(self) -> bool:
        if self._lost:
            return True
        return time.monotonic() - self._renewed_at >= self._stale_timeout_s > 0

    @property
    def known_lost(self) -> bool:
        """Lost for certain (a renewal or write matched no row), not merely overdue."""
        return self._lost

    def renewed(self) -> None:
        self._renewed_at = time.monotonic()

    def mark_lost(self) -> bool:
        """Record the loss; True the first time (so it is counted once)."""
        first, self._lost = not self._lost, True
        return first


@dataclass(eq=False)
class Run:
    """One execution of a job for a scope and plan time, as the handler sees it.

    ``heartbeat()`` raises :class:`LeaseLost` once the scheduler knows the lease is gone, or
    when no renewal has succeeded for a whole ``stale_timeout`` (after which another replica
    may legitimately have stolen the lease). The scheduler itself renews the lease every
    ``heartbeat_interval``; handlers only call ``heartbeat()`` to find out early.

    ``payload`` is the schedule's payload as stored when the plan was claimed (dynamic jobs,
    docs/schedules.md); ``{}`` for code-defined jobs. For ``transactional=True`` jobs ``conn`` is a
    psycopg connection (``AsyncConnection`` for ``async def`` handlers) inside a transaction
    that pgsched commits together with the SUCCESS row, guarded by the lease token, or rolls
    back.
    """

    job: str
    scope: Scope
    plan_time: datetime
    attempt: int
    max_attempts: int
    execution_id: uuid.UUID
    lease_token: uuid.UUID
    fencing_token: int
    runner_id: str
    trigger: Trigger
    replica_log: FilteringBoundLogger = field(repr=False)  # ``log`` before it is bound
    payload: dict[str, Any] = field(default_factory=dict)
    conn: psycopg.AsyncConnection[Any] | psycopg.Connection[Any] | None = None
    _liveness: Liveness = field(default_factory=Liveness, init=False, repr=False)

    @functools.cached_property
    def log(self) -> FilteringBoundLogger:
        """The replica's logger bound to this run's job, scope, plan time, attempt and
        execution id (bound on first use: most runs of a busy replica log nothing)."""
        return self.replica_log.bind(
            job=self.job,
            scope=str(self.scope),
            plan_time=self.plan_time.isoformat(),
            attempt=self.attempt,
            execution_id=str(self.execution_id),
        )

    @property
    def lease_lost(self) -> bool:
        """True once the lease is known lost or could not be renewed within ``stale_timeout``."""
        return self._liveness.lost

    def heartbeat(self) -> None:
        """Raise :class:`LeaseLost` if this run no longer holds its lease."""
        if self._liveness.lost:
            raise LeaseLost(
                f"job {self.job!r} scope {self.scope} plan {self.plan_time.isoformat()}: lease lost"
            )


def watch(run: Run, liveness: Liveness) -> None:
    """Make ``run.lease_lost`` and ``run.heartbeat()`` follow ``liveness``."""
    run._liveness = liveness  # noqa: SLF001 - Run is public: this hook stays off its API
