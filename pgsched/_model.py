"""The small value types handlers see: scopes, results and the run context."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import psycopg
import structlog
from structlog.typing import FilteringBoundLogger

from ._errors import ConfigError, LeaseLost

Trigger = Literal["schedule", "manual", "backfill"]
MAX_SCOPE_BYTES = 1024


@dataclass(frozen=True, slots=True, order=True)
class Scope:
    """What a job runs for: ``Scope("tenant", "42")``. Integer ids are stored as text."""

    kind: str
    id: str

    def __post_init__(self) -> None:
        for name in ("kind", "id"):
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, name, str(value))
            elif not isinstance(value, str):
                raise ConfigError(f"Scope {name}={value!r} must be a string")
            value = getattr(self, name)
            if value == "":
                raise ConfigError(f"Scope {name} must not be empty")
            if "\x00" in value:
                raise ConfigError(f"Scope {name}={value!r} contains a NUL character")
            try:
                size = len(value.encode("utf-8"))
            except UnicodeEncodeError:
                raise ConfigError(f"Scope {name}={value!r} is not valid Unicode") from None
            if size > MAX_SCOPE_BYTES:
                # The unique key (job, kind, id, plan_time) is a btree entry, whose size
                # PostgreSQL caps near 2.7 kB; two 1 kB parts and a job name fit.
                raise ConfigError(
                    f"Scope {name}={value[:40]!r}... is {size} bytes; the limit is "
                    f"{MAX_SCOPE_BYTES} bytes of UTF-8"
                )

    @classmethod
    def parse(cls, text: str) -> Scope:
        """Parse ``KIND:ID`` as written on the command line (the id may contain colons)."""
        kind, sep, ident = text.partition(":")
        if not sep or not kind or not ident:
            raise ConfigError(f"scope {text!r} is not of the form KIND:ID")
        return cls(kind, ident)

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"


GLOBAL = Scope("global", "global")


@dataclass(frozen=True, slots=True)
class Result:
    """What a handler may return: a row count and a small JSON-serialisable payload."""

    rows_affected: int = 0
    data: Any = field(default_factory=dict)


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
    log: FilteringBoundLogger
    payload: dict[str, Any] = field(default_factory=dict)
    conn: psycopg.AsyncConnection[Any] | psycopg.Connection[Any] | None = None
    _liveness: Liveness = field(default_factory=Liveness, init=False, repr=False)

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
    run._liveness = liveness


def bound_logger(**fields: Any) -> FilteringBoundLogger:
    """The pgsched structlog logger, bound to ``fields``."""
    logger: FilteringBoundLogger = structlog.get_logger("pgsched").bind(**fields)
    return logger
