"""Handlers on Django's ORM. Each run starts and ends as a Django request does: the
connections of the handler's thread are checked before it and closed after it when they are
broken or older than ``CONN_MAX_AGE`` (``close_old_connections``, what Celery's Django
support does around each task). A ``transactional=True`` run happens inside
``transaction.atomic()`` on pgsched's database alias, and pgsched writes its terminal row
through that same connection, so the handler's ORM writes and SUCCESS commit together or not
at all; ``run.conn`` is that connection's psycopg connection."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Unpack

from asgiref.sync import sync_to_async
from django.db import close_old_connections, connections, transaction

from .._errors import ConfigError
from .._jobs.spec import Handler, JobOptions, JobSpec
from .._run import Run
from .._scheduler import Scheduler


class DjangoScheduler(Scheduler):
    """The project's ``Scheduler`` (``pgsched.django.scheduler``): pgsched's tables on the
    database of ``alias``, its jobs' handlers on Django's ORM."""

    def __init__(self, alias: str, **options: Any) -> None:
        super().__init__(**options)
        self.alias = alias
        self._run_transaction = functools.partial(atomic_run, alias)

    def register(self, handler: Handler, **options: Unpack[JobOptions]) -> JobSpec:
        name = options.get("name") or getattr(handler, "__name__", "?")
        transactional = options.get("transactional") is True
        return super().register(
            on_django(handler, job=str(name), transactional=transactional), **options
        )


@contextlib.contextmanager
def atomic_run(alias: str, job: str) -> Iterator[Any]:
    """The transaction of a sync transactional run: Django's own connection of this thread
    for ``alias``, inside ``atomic()``; committed when the block ends cleanly, rolled back
    when it raises. The check and the close are outside the block: inside it, Django would
    close a connection that is not in autocommit. ``job``: the run's (every job shares the
    alias)."""
    close_old_connections()
    try:
        with transaction.atomic(using=alias):
            connection = connections[alias]
            connection.ensure_connection()
            yield connection.connection
    finally:
        close_old_connections()


def on_django(handler: Handler, *, job: str, transactional: bool) -> Handler:
    """``handler`` with its thread's connections checked before and closed after each run
    (a transactional one's: by :func:`atomic_run`). Django's transactions are synchronous: a
    transactional ``async def`` handler is refused."""
    if not callable(handler):
        return handler  # the job's validation names it
    is_async = inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004
    )
    if transactional:
        if is_async:
            raise ConfigError(
                f"job {job!r}: transactional=True needs a def handler under Django"
                " (Django's transaction.atomic() is synchronous only)"
            )
        return handler
    return _async_on_django(handler) if is_async else _sync_on_django(handler)


def _sync_on_django(handler: Callable[[Run], Any]) -> Callable[[Run], Any]:
    @functools.wraps(handler)
    def run_on_django(run: Run) -> Any:
        close_old_connections()
        try:
            return handler(run)
        finally:
            close_old_connections()

    return run_on_django


def _async_on_django(handler: Callable[[Run], Awaitable[Any]]) -> Callable[[Run], Any]:
    # Django's async ORM runs its queries on one thread of asgiref's (thread_sensitive): the
    # check and the close run there, on the connections those queries use.
    close = sync_to_async(close_old_connections, thread_sensitive=True)

    @functools.wraps(handler)
    async def run_on_django(run: Run) -> Any:
        await close()
        try:
            return await handler(run)
        finally:
            await close()

    return run_on_django
