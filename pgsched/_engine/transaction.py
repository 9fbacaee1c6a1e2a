"""Transactional runs: the handler's writes through ``run.conn`` and the SUCCESS row commit in
one transaction, guarded by the lease token, so they commit if and only if the lease holds.
Owns the run's own connection; the engine's pool is never lent to a handler. A transaction
that failed because the database was unavailable (a failover, a restart, a read-only server)
is reported as :class:`TransactionUnavailable`, not as the handler's failure: nothing of it
committed (or, a COMMIT cut off, all of it did), so the plan is not spent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg

from .._jobs.spec import JobSpec
from .._records import Finish
from .._run import Batch, Run, RunTransaction
from .._storage.answering import (
    ANSWER_GRACE_S,
    ENGINE_ANSWER_TIMEOUT_S,
    BoundedAsyncConnection,
    BoundedConnection,
)
from .._storage.connection import (
    connect_options,
    not_writable,
    require_writable,
    require_writable_sync,
    unavailable,
)
from .._storage.servers import ServerWatch
from .._storage.store import Store
from .values import Outcome

Written = tuple[Outcome, datetime | None]
# The outcomes of the transaction's runs, from what the handler returned.
ToOutcomes = Callable[[object], list[Outcome]]
# While the handler runs, its transaction may sit idle as long as the handler may run, and a
# little more; once it has returned, for the job's stale_timeout at most (commit_phase).
_IDLE_MARGIN = timedelta(seconds=10)


class TransactionUnavailable(Exception):
    """A transactional run's (or batch's) transaction failed for want of a database.
    ``outcomes`` are what it was committing when the connection was lost during its COMMIT
    (which may have landed), else None: then nothing committed."""

    def __init__(self, cause: BaseException, outcomes: list[Outcome] | None) -> None:
        super().__init__(str(cause))
        self.cause, self.outcomes = cause, outcomes


def _lost_database(conn: psycopg.BaseConnection[Any], exc: BaseException) -> bool:
    """The run's transaction failed because of the database, not of the handler: its
    connection broke (a dropped server, a failover), or the server would not take writes."""
    exc = _driver_error(exc)
    return unavailable(exc) and (conn.broken or conn.closed or not_writable(exc))


class Transactions:
    """Opens a connection per transactional run (``conninfo``, named ``app_name``)."""

    def __init__(
        self,
        conninfo: str,
        app_name: str,
        store: Store,
        *,
        transaction_pooling: bool,
        synchronous: bool = False,
        watch: ServerWatch | None = None,
        answer_timeout: float = ENGINE_ANSWER_TIMEOUT_S,
        run_transaction: RunTransaction | None = None,
    ) -> None:
        self._conninfo, self._app_name, self._store = conninfo, app_name, store
        self._run_transaction = run_transaction
        # The replica's: a run commits only on the server the replica writes to.
        self._watch = watch if watch is not None else ServerWatch()
        # Behind a transaction-pooling PgBouncer no statement may be prepared and settings
        # are made inside the run's transaction only (docs/pgbouncer.md).
        self._local = transaction_pooling
        # The SUCCESS row is a terminal write: with synchronous claims it waits for a
        # synchronous standby (set just before it, so a handler's own setting does not win).
        self._synchronous = synchronous
        # pgsched's own statements on the run's connection are bounded as the engine's are;
        # the handler's, by its run_timeout (the server's statement_timeout) and a grace.
        self._answer_timeout = answer_timeout

    def _connect_options(self) -> dict[str, Any]:
        return connect_options(self._conninfo, self._app_name, transaction_pooling=self._local)

    async def lease_statuses(self, runs: Sequence[Run]) -> list[str | None]:
        """The status of each run's row while its lease token still holds it, else None (on
        a connection of its own: the engine's pool is never involved in a run)."""
        try:
            conn = await self._open_async()
        except TransactionUnavailable as exc:
            raise exc.cause from None  # the caller retries what the database failed
        async with conn:
            return [
                await self._store.lease_status(
                    conn, run.execution_id, run.lease_token, run.plan_time
                )
                for run in runs
            ]

    async def _open_async(self) -> BoundedAsyncConnection:
        """A connection to the server the replica writes to (steered past a refused host; a
        standby, a read-only or a demoted server refused): else :class:`TransactionUnavailable`
        when the database is unavailable."""
        conn: BoundedAsyncConnection | None = None
        try:
            conninfo = self._watch.steer(self._conninfo)
            conn = await BoundedAsyncConnection.connect(conninfo, **self._connect_options())
            conn.answer_timeout = self._answer_timeout
            await require_writable(self._store, conn, self._watch)
            return conn
        except Exception as exc:
            if conn is not None and not conn.closed:
                await conn.close()
            if unavailable(exc):
                raise TransactionUnavailable(exc, None) from exc
            raise

    def _open_sync(self) -> BoundedConnection:
        """:meth:`_open_async` for a worker thread: the server is checked, never adopted (the
        replica's pool adopts a new one)."""
        conn: BoundedConnection | None = None
        try:
            conninfo = self._watch.steer(self._conninfo)
            conn = BoundedConnection.connect(conninfo, **self._connect_options())
            conn.answer_timeout = self._answer_timeout
            require_writable_sync(self._store, conn, self._watch)
            return conn
        except Exception as exc:
            if conn is not None and not conn.closed:
                conn.close()
            if unavailable(exc):
                raise TransactionUnavailable(exc, None) from exc
            raise

    async def run_async(
        self, job: JobSpec, arg: Run | Batch, runs: Sequence[Run], outcomes: ToOutcomes
    ) -> list[Written] | None:
        """Run an ``async def`` handler of ``arg`` (a run, or a batch of ``runs``) in a
        transaction with the terminal rows of ``runs``; None when a lease was lost (rolled
        back). Exceptions (the handler's, or ``outcomes`` refusing the result) roll back too;
        a database that failed the transaction raises :class:`TransactionUnavailable`."""
        timeout = job.run_timeout
        conn = await self._open_async()
        committing: list[Outcome] | None = None  # set once the COMMIT is under way
        async with conn:
            try:
                await conn.set_autocommit(False)
                # The handler's own statements keep the server's JIT and TimeZone settings.
                await self._store.configure_session(
                    conn, timeout, timeout + _IDLE_MARGIN, local=self._local, handler=True
                )
                _lend(runs, conn)
                conn.answer_timeout = timeout.total_seconds() + ANSWER_GRACE_S
                done = outcomes(await job.handler(arg))
                conn.answer_timeout = self._answer_timeout
                await self._store.commit_phase(
                    conn, job.stale_timeout, synchronous=self._synchronous
                )
                written = _held(await self._store.finish(conn, _rows(runs, done)), runs, done)
                committing = done if written is not None else None
                await (conn.commit() if written is not None else conn.rollback())
                return written
            except Exception as exc:
                if _lost_database(conn, exc):
                    raise TransactionUnavailable(exc, committing) from exc
                raise
            finally:
                _lend(runs, None)

    def run_sync(
        self, job: JobSpec, arg: Run | Batch, *, runs: Sequence[Run], outcomes: ToOutcomes
    ) -> list[Written] | None:
        """:meth:`run_async` for a ``def`` handler, in its worker thread: on a sync connection
        of its own, or in the transaction the scheduler's ``run_transaction`` opens (Django's
        ``atomic()`` on the project's database), whose writes the handler's ORM shares."""
        # Set once the COMMIT (the block's exit) is under way.
        committing: list[Outcome] | None = None
        entered = False
        try:
            with self._sync_transaction(job) as conn:  # commits on a clean exit
                entered = True
                try:
                    done = self._transact_sync(conn, job, arg, runs, outcomes)
                except Exception as exc:
                    if _lost_database(conn, exc):
                        raise TransactionUnavailable(exc, None) from exc
                    raise
                finally:
                    _lend(runs, None)
                if done is None:
                    raise _Released  # the lease was lost: roll back
                committing = [outcome for outcome, _ in done]
            return done
        except _Released:
            return None
        except TransactionUnavailable:
            raise
        except Exception as exc:
            # Opening the borrowed transaction (its connection) or its COMMIT failed.
            if (committing is not None or not entered) and unavailable(_driver_error(exc)):
                raise TransactionUnavailable(exc, committing) from exc
            raise

    def _sync_transaction(self, job: JobSpec) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A connection in a transaction that commits when its block ends cleanly and rolls
        back when it raises: the scheduler's ``run_transaction``, else one of the run's own
        (psycopg's connection block, which also closes it)."""
        if self._run_transaction is not None:
            return self._run_transaction(job.name)
        conn = self._open_sync()
        conn.autocommit = False
        return conn

    def _transact_sync(
        self,
        conn: psycopg.Connection[Any],
        job: JobSpec,
        arg: Run | Batch,
        runs: Sequence[Run],
        outcomes: ToOutcomes,
    ) -> list[Written] | None:
        """The handler and the terminal rows in ``conn``'s transaction; None when a lease no
        longer holds its row."""
        timeout = job.run_timeout
        # A borrowed connection outlives the run: it keeps none of pgsched's settings.
        local = self._local or self._run_transaction is not None
        self._store.configure_session_sync(
            conn, timeout, timeout + _IDLE_MARGIN, local=local, handler=True
        )
        _lend(runs, conn)
        _answer_within(conn, timeout.total_seconds() + ANSWER_GRACE_S)
        done = outcomes(job.handler(arg))
        _answer_within(conn, self._answer_timeout)
        self._store.commit_phase_sync(conn, job.stale_timeout, synchronous=self._synchronous)
        return _held(self._store.finish_sync(conn, _rows(runs, done)), runs, done)


def _lend(
    runs: Sequence[Run], conn: psycopg.AsyncConnection[Any] | psycopg.Connection[Any] | None
) -> None:
    """Give each run of the handler (one, or its batch's) the transaction ``conn``."""
    for run in runs:
        run.conn = conn


def _rows(runs: Sequence[Run], outcomes: list[Outcome]) -> list[Finish]:
    return [outcome.finish(run) for run, outcome in zip(runs, outcomes, strict=True)]


def _held(
    written: dict[UUID, datetime | None], runs: Sequence[Run], outcomes: list[Outcome]
) -> list[Written] | None:
    """Each run's outcome and next retry, when every row was written (each lease held),
    else None: the transaction rolls back."""
    if not all(run.execution_id in written for run in runs):
        return None
    return [
        (outcome, written[run.execution_id]) for run, outcome in zip(runs, outcomes, strict=True)
    ]


class _Released(Exception):
    """Raised in a run's transaction block to roll it back: the lease no longer holds it."""


def _answer_within(conn: psycopg.Connection[Any], seconds: float) -> None:
    """Bound the wait for the server's answers on a connection of pgsched's own (a borrowed
    one keeps its owner's bounds)."""
    if isinstance(conn, BoundedConnection):
        conn.answer_timeout = seconds


def _driver_error(exc: BaseException) -> BaseException:
    """The driver's error behind ``exc`` (Django wraps psycopg's errors in its own)."""
    cause = exc.__cause__
    return cause if not isinstance(exc, psycopg.Error) and isinstance(cause, psycopg.Error) else exc
