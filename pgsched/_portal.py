"""The event loop behind the synchronous facades, the one bridge from sync code to the async
core: ``Admin`` (and the ``Scheduler``'s shortcuts) run each operation of the core here, and
``Scheduler.run_once`` its tick, on one daemon thread per process, so the connections an Admin
keeps between calls stay on the loop that opened them. Callers on any thread (or inside
another running loop) block until their coroutine is done; many threads' calls run
concurrently on this loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ._errors import PgschedError

_T = TypeVar("_T")


class Portal:
    """One event loop in a daemon thread, started on first use (again in a forked child)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0
        self._thread: threading.Thread | None = None

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="pgsched-admin")
                thread.daemon = True  # a caller's exit does not wait for it
                thread.start()
                self._loop, self._thread, self._pid = loop, thread, os.getpid()
            return self._loop

    def owns_running_loop(self) -> bool:
        """Whether the caller is a coroutine on this portal's loop."""
        try:
            return asyncio.get_running_loop() is self._loop and self._pid == os.getpid()
        except RuntimeError:
            return False

    def call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the portal's loop and return its result (or raise its error).
        Refused from a coroutine on that loop, which would wait on itself for ever."""
        if self.owns_running_loop():
            coro.close()
            raise PgschedError(
                "a blocking pgsched call (Admin, a Scheduler method) from a coroutine running on"
                " pgsched's own loop would wait for ever: await the coroutine instead"
                " (Scheduler.aio, Admin.operations)"
            )
        future = asyncio.run_coroutine_threadsafe(coro, self._running())
        try:
            return future.result()
        except BaseException:
            future.cancel()  # an interrupted caller does not leave its operation running
            raise

    def run_soon(self, coro: Coroutine[Any, Any, None], wait_s: float) -> None:
        """Start ``coro`` on the portal's loop and wait up to ``wait_s`` for it (not at all
        on the portal's own thread, which would wait on itself)."""
        loop = self._running()
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        if threading.current_thread() is not self._thread:
            with contextlib.suppress(Exception):  # slow or failed: it ends on its own
                future.result(timeout=wait_s)


PORTAL = Portal()
