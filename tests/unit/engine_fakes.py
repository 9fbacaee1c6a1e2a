"""Building blocks of the unit tests of the engine's collaborators (leases, offers, the writer,
the executor): real jobs, claims, leases and recorders, and fakes of the two things those
collaborators reach beyond themselves, the store (its SQL) and the pool. The fakes keep the
rows the store would hold in memory, so a test can see what a write would have done; they
stand in for the database only where it adds nothing to what is tested (the integration
tests run the same code against PostgreSQL).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import structlog
from prometheus_client import CollectorRegistry

import pgsched
from pgsched._engine.leases import LeaseTable, open_lease
from pgsched._engine.recorder import Recorder
from pgsched._engine.values import Claim, Lease, Outcome
from pgsched._jobs.spec import JobSpec, build_job
from pgsched._records import Finish, Renewal, Restore
from pgsched._telemetry.metrics import Metrics

PLAN = datetime(2030, 1, 7, 9, 0, tzinfo=UTC)  # a Monday, on every cadence below an hour
RUNNER = "r1"


def job(handler: Any = None, **options: Any) -> JobSpec:
    """A validated job (``every="1m"`` and the name ``job`` unless given)."""
    options.setdefault("name", "job")
    if not {"every", "cron", "planner", "dynamic"} & set(options):
        options["every"] = "1m"
    return build_job(handler or (lambda run: None), **options)


def recorder() -> Recorder:
    """A real recorder on a registry of its own (its counters are what the tests read)."""
    return Recorder(Metrics(CollectorRegistry()), RUNNER)


def sample(rec: Recorder, name: str, **labels: str) -> float:
    """A metric's value in ``rec``'s registry (0 for a series never written)."""
    return rec.metrics.registry.get_sample_value(name, labels) or 0.0


def claim(
    *,
    scope: pgsched.Scope = pgsched.GLOBAL,
    plan: datetime = PLAN,
    kind: str = "won",
    trigger: str = "schedule",
    attempt: int = 1,
    max_attempts: int = 1,
    started_at: datetime | None = None,
) -> Claim:
    """A row this replica just claimed, with a fresh lease token."""
    return Claim(
        kind=kind,  # type: ignore[arg-type]
        execution_id=uuid.uuid4(),
        scope=scope,
        plan_time=plan,
        trigger=trigger,  # type: ignore[arg-type]
        attempt=attempt,
        max_attempts=max_attempts,
        lease_token=uuid.uuid4(),
        fencing_token=1,
        started_at=started_at,
    )


def lease(spec: JobSpec, **claim_options: Any) -> Lease:
    """The lease of a fresh claim of ``spec`` (see :func:`claim`)."""
    log = structlog.get_logger("test")
    return open_lease(spec, claim(**claim_options), RUNNER, log, time.monotonic())


def table(max_concurrency: int = 8, rec: Recorder | None = None) -> tuple[LeaseTable, list[int]]:
    """A lease table, and the list its slots-freed callback appends to."""
    freed: list[int] = []
    leases = LeaseTable(max_concurrency, rec or recorder(), lambda: freed.append(1))
    return leases, freed


async def idle(leases: LeaseTable) -> None:
    """Wait, with a deadline (5 s), until every lease of ``leases`` is released."""
    await asyncio.wait_for(leases.wait_idle(), 5)


def ok(status: str = "SUCCESS") -> Outcome:
    return Outcome(status, 5, rows_affected=1)  # type: ignore[arg-type]


# -- the store and the pool, faked -------------------------------------------------------


class FakeConn:
    """What the writer does with a pooled connection: transactions, and closing it."""

    def __init__(self) -> None:
        self.closed = False
        self.in_transaction = False

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        self.in_transaction = True
        try:
            yield
        finally:
            self.in_transaction = False

    async def close(self) -> None:
        self.closed = True


class FakePool:
    """A pool lending one :class:`FakeConn` at a time."""

    conninfo = "host=db.example port=5432 dbname=app"

    def __init__(self) -> None:
        self.conn = FakeConn()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[FakeConn]:
        yield self.conn


@dataclass
class FakeStore:
    """The writer's statements on an in-memory table: ``held`` maps each execution id to the
    lease token its row holds. ``fail`` is consulted before every statement (a batch of
    :class:`Finish` rows, or ``"heartbeat"``) and may raise; ``gate``, when set, holds every
    terminal write until it is set."""

    held: dict[UUID, UUID] = field(default_factory=dict)
    finished: dict[UUID, Finish] = field(default_factory=dict)
    batches: list[list[Finish]] = field(default_factory=list)
    beats: list[list[UUID]] = field(default_factory=list)
    reapplied: list[list[Restore]] = field(default_factory=list)
    synchronous_in_transaction: list[bool] = field(default_factory=list)
    fail: Callable[[object], None] = lambda statement: None
    gate: asyncio.Event | None = None
    busy: int = 0  # statements in progress right now
    most_busy: int = 0

    def hold(self, *leases: Lease) -> None:
        for held in leases:
            self.held[held.execution_id] = held.run.lease_token

    @asynccontextmanager
    async def _statement(self, what: object) -> AsyncIterator[None]:
        self.busy += 1
        self.most_busy = max(self.most_busy, self.busy)
        try:
            self.fail(what)
            yield
        finally:
            self.busy -= 1

    async def finish(self, conn: FakeConn, rows: list[Finish]) -> dict[UUID, datetime | None]:
        self.batches.append(list(rows))
        async with self._statement(rows):
            if self.gate is not None:
                await self.gate.wait()
            written: dict[UUID, datetime | None] = {}
            for row in rows:
                if self.held.get(row.id) == row.token:
                    self.finished[row.id] = row
                    del self.held[row.id]
                    retry = row.retry_delay_s
                    written[row.id] = None if retry is None else PLAN + timedelta(seconds=retry)
            return written

    async def heartbeat(self, conn: FakeConn, leases: list[Renewal]) -> set[UUID]:
        self.beats.append([lease.id for lease in leases])
        async with self._statement("heartbeat"):
            return {lease.id for lease in leases if self.held.get(lease.id) == lease.token}

    async def synchronous_commit(self, conn: FakeConn) -> None:
        self.synchronous_in_transaction.append(conn.in_transaction)

    async def reapply(self, conn: FakeConn, rows: list[Restore]) -> dict[str, int]:
        self.reapplied.append(list(rows))
        return {"brought": len(rows), "restored": 0}
