"""The handler's view of one execution (:class:`Run`) and whether its lease still holds
(:class:`Liveness`, set by the engine's lease table)."""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, overload

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
    # How the handler said this run ended (succeed / fail), which its return or raise
    # does not override.
    mark: Mark | None = field(default=None, init=False, repr=False)

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

    def succeed(self, result: object = None) -> None:
        """End this run SUCCESS with ``result`` (None, an int or a :class:`Result`, as a
        handler returns), whatever the handler does next. The last mark stands."""
        self.mark = Mark(True, result)

    def fail(self, error: BaseException | str) -> None:
        """End this run FAILED with ``error`` (an exception, or a message), retried as the
        job's ``max_attempts`` and ``retry_backoff`` say, whatever the handler does next.
        The last mark stands."""
        if not isinstance(error, BaseException | str):
            raise TypeError(f"run.fail() takes an exception or a message, not {error!r}")
        self.mark = Mark(False, error)


@dataclass(frozen=True, slots=True)
class Mark:
    """A run's end as its handler marked it: ``succeeded`` with ``value`` (the result), or
    failed with ``value`` (the error)."""

    succeeded: bool
    value: object


class Batch(Sequence[Run]):
    """The runs a batch handler (``batch_size=``) receives in one call, in plan order: each
    with its own scope, plan time, execution id, lease and fencing token. Mark runs with
    ``run.succeed()`` / ``run.fail()``; when the handler returns, the unmarked ones succeed,
    and when it raises, they fail with its exception. For ``transactional=True`` jobs
    ``conn`` (and every run's ``conn``) is the one transaction of the whole batch."""

    __slots__ = ("_runs", "job")

    def __init__(self, job: str, runs: Sequence[Run]) -> None:
        self.job = job
        self._runs = tuple(runs)

    @property
    def conn(self) -> psycopg.AsyncConnection[Any] | psycopg.Connection[Any] | None:
        """The transaction every run of a ``transactional=True`` batch shares (else None)."""
        return self._runs[0].conn if self._runs else None

    @overload
    def __getitem__(self, index: int) -> Run: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Run]: ...

    def __getitem__(self, index: int | slice) -> Run | Sequence[Run]:
        return self._runs[index]

    def __len__(self) -> int:
        return len(self._runs)

    def __iter__(self) -> Iterator[Run]:
        return iter(self._runs)

    def __repr__(self) -> str:
        return f"Batch(job={self.job!r}, runs={len(self._runs)})"


def watch(run: Run, liveness: Liveness) -> None:
    """Make ``run.lease_lost`` and ``run.heartbeat()`` follow ``liveness``."""
    run._liveness = liveness  # noqa: SLF001 - Run is public: this hook stays off its API
