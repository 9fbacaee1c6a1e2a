"""The action log: every operator action the operations core runs is recorded once, here,
whichever facade called it (the command line, ``Admin``, ``AsyncAdmin``, the HTTP API, the
dashboard): who (the facade's surface and its actor), what (action, job, scope, execution,
details), when (the database's clock).

An action that writes records itself in its own transaction, so the record and the change
commit or roll back together. A failed action (a :class:`PgschedError`: refused, not found,
invalid) rolls its change back and is then recorded with outcome ``error`` and the message,
in a statement of its own; one whose database could not be reached may record nothing.
"""

from __future__ import annotations

import copy
import getpass
import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar
from uuid import UUID

from .._errors import ConfigError, PgschedError
from .._records import ActionRow
from .._storage.dashboard import DashboardStore
from .._storage.statements import Conn

SURFACES = ("cli", "admin", "async_admin", "http", "dashboard", "django_admin")
_O = TypeVar("_O", bound="Audited")


def local_user() -> str:
    """``user@host`` of this process (the command line's actor)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's)
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


@dataclass(frozen=True, slots=True)
class Actor:
    """Who acts: the surface the action came through and its actor (an OS user, a label
    given to ``Admin(actor=...)``, an HTTP token's role and the caller's address)."""

    surface: str
    name: str

    @classmethod
    def python(cls, surface: str, name: str | None) -> Actor:
        """An ``Admin``'s or ``AsyncAdmin``'s: ``name``, else ``python:user@host``."""
        if surface not in SURFACES:
            raise ConfigError(f"surface={surface!r} is not one of {', '.join(SURFACES)}")
        if name is not None and (not isinstance(name, str) or not 1 <= len(name) <= 200):
            raise ConfigError(f"actor={name!r} must be a string of 1 to 200 characters")
        return cls(surface, name or f"python:{local_user()}")


class Action(StrEnum):
    """The operator actions, by the name the action log records them under (and the
    dashboard's forms post as ``action``)."""

    TRIGGER = "trigger"
    PAUSE = "pause"
    RESUME = "resume"
    CANCEL = "cancel"
    RETRY = "retry"
    FORGET = "forget"
    BACKFILL = "backfill"
    PRUNE = "prune"
    SCHEDULE_PUT = "schedule_put"
    SCHEDULE_PUT_MANY = "schedule_put_many"
    SCHEDULE_PAUSE = "schedule_pause"
    SCHEDULE_RESUME = "schedule_resume"
    SCHEDULE_DELETE = "schedule_delete"
    CELERY_IMPORT = "celery_import"


@dataclass(slots=True)
class Entry:
    """What one action did; the action may add its execution and details while it runs."""

    action: Action
    job: str | None = None
    scope: str | None = None
    execution_id: UUID | None = None
    details: dict[str, Any] = field(default_factory=dict)


class Audited:
    """Recording of the operations of :class:`~pgsched._operations.core.Operations` (which
    sets the attributes declared here)."""

    _actor: Actor
    _dash: DashboardStore
    _conn: Callable[[], AbstractAsyncContextManager[Conn]]

    @property
    def actor(self) -> Actor:
        """Who this core's actions are recorded as."""
        return self._actor

    @asynccontextmanager
    async def _recorded(self, entry: Entry) -> AsyncIterator[Conn]:
        """A connection in a transaction for the action ``entry``, recorded in it on success;
        on a :class:`PgschedError` the transaction rolls back and the failure is recorded."""
        try:
            async with self._conn() as conn, conn.transaction():
                yield conn
                await self._dash.record_action(conn, self._row(entry, "ok", None))
        except PgschedError as exc:
            await self._record_failure(entry, exc)
            raise

    async def _record(self, entry: Entry) -> None:
        """Record an action that ran in several transactions of its own (prune)."""
        async with self._conn() as conn:
            await self._dash.record_action(conn, self._row(entry, "ok", None))

    async def _record_failure(self, entry: Entry, exc: PgschedError) -> None:
        # The action's own error is the one to raise: a database that refuses the record too
        # (unreachable, not migrated) leaves the failure unrecorded.
        with suppress(Exception):
            async with self._conn() as conn:
                await self._dash.record_action(conn, self._row(entry, "error", str(exc)))

    def _row(self, entry: Entry, outcome: str, detail: str | None) -> ActionRow:
        return ActionRow(
            surface=self._actor.surface,
            actor=self._actor.name,
            action=str(entry.action),
            job=entry.job,
            scope=entry.scope,
            execution_id=entry.execution_id,
            details=json.dumps(entry.details, default=str) if entry.details else None,
            outcome=outcome,
            detail=detail,
        )


def acting(ops: _O, actor: Actor) -> _O:
    """``ops`` with its actions recorded as ``actor``'s (an HTTP request's caller): the same
    connections, store and jobs."""
    bound = copy.copy(ops)
    bound._actor = actor  # noqa: SLF001 (this module's own class)
    return bound
