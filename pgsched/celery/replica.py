"""A pgsched replica on a thread of its own, for the life of a Celery beat: the engine's loop
(claims, leases, retries, pause, trigger, metrics) runs there while Celery's beat loop only
checks that it is alive.
"""

from __future__ import annotations

import asyncio
import threading

from .._errors import PgschedError
from .._scheduler import Scheduler


class ReplicaEnded(PgschedError):
    """The beat's pgsched replica stopped on its own: the beat must not go on sending nothing."""


class ReplicaThread:
    """``scheduler.serve()`` on an event loop in a daemon thread (``run()`` would install
    signal handlers, which belong to Celery's beat here)."""

    def __init__(self, scheduler: Scheduler, http_port: int | None, http_host: str) -> None:
        self._scheduler = scheduler
        self._http = (http_port, http_host)
        self._error: BaseException | None = None
        self._stopping = False
        self._thread = threading.Thread(target=self._main, name="pgsched-beat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _main(self) -> None:
        try:
            asyncio.run(self._scheduler.serve(*self._http))
        except BaseException as exc:  # reported by check() on the beat's thread
            self._error = exc

    def check(self) -> None:
        """Raise :class:`ReplicaEnded` when the replica's loop ended without being asked."""
        if self._thread.is_alive() or self._stopping:
            return
        error = self._error
        reason = f"{type(error).__name__}: {error}" if error is not None else "it returned"
        raise ReplicaEnded(f"pgsched replica of this beat ended ({reason})") from error

    def stop(self, timeout: float) -> None:
        """Stop claiming, let publishes in flight finish, wait up to ``timeout`` seconds."""
        self._stopping = True
        self._scheduler.stop()
        if self._thread.is_alive():
            self._thread.join(timeout)
