"""``Admin``: the operations core (``_operations``) for synchronous callers. Translates and
calls, nothing more: validation and SQL live below it. Its operator methods are generated from
the core's coroutines (``sync_operations``, by tools/gen_admin.py); each runs on the process's
portal loop (``_portal``), where the Admin keeps a few idle connections between calls
(``_operations.connectors``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from .._dsn import resolve_dsn
from .._jobs.spec import JobSpec
from .._operations.audit import Actor
from .._operations.connectors import KeptConnections, Target
from .._operations.core import Operations, no_jobs
from .._times import Duration
from .sync_operations import SyncOperations


class Admin(SyncOperations):
    """Operator actions on one database and schema, for code that is not ``async``.

    The DSN is ``dsn``, else ``PGSCHED_DSN``, else ``DATABASE_URL``, read when first needed.
    Each action borrows a connection (statements bounded by ``statement_timeout``): an idle
    one this Admin kept from an earlier action, checked first, or a new one; up to
    ``KEEP_IDLE`` (4) stay open between actions, until :meth:`close` or the interpreter exits.
    Safe to share between threads. The same actions as coroutines: :class:`AsyncAdmin`.
    Its actions are recorded in the action log as ``actor``'s (default ``python:user@host``),
    surface ``admin``.
    """

    def __init__(
        self,
        dsn: str | None = None,
        schema: str = "pgsched",
        statement_timeout: Duration = "30s",
        *,
        jobs: Callable[[], Mapping[str, JobSpec]] = no_jobs,
        app_name: str = "pgsched admin",
        transaction_pooling: bool | None = None,
        actor: str | None = None,
        surface: str = "admin",
    ) -> None:
        self._dsn = dsn
        target = Target.parse(dsn, schema, statement_timeout, app_name, transaction_pooling)
        self.schema, self.statement_timeout = target.schema, target.statement_timeout
        self.transaction_pooling = target.transaction_pooling
        self._connections = KeptConnections(target)
        # Who its actions are recorded as: ``actor``, else python:user@host (``surface`` is
        # the command line's "cli" when it is the one acting).
        self._ops = Operations(
            self.schema, self._connections.connect, jobs, actor=Actor.python(surface, actor)
        )
        self._connections.close_with(self)  # collected, or the interpreter exits

    @property
    def dsn(self) -> str | None:
        return resolve_dsn(self._dsn)

    @property
    def operations(self) -> Operations:
        """The coroutines behind this Admin's methods, for code on a loop of its own (such
        as the scheduler's retention job): each action there gets a connection of its own."""
        return self._ops

    def close(self) -> None:
        """Close the connections kept between actions (a later action opens new ones)."""
        self._connections.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _core(self) -> Operations:
        return self._ops
