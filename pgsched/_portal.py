"""The event loop behind the synchronous facades: ``Admin`` runs each operation of the async
core here, on one daemon thread per process, so the connections it keeps between calls stay
on the loop that opened them. Callers on any thread (or inside another running loop) block
until their coroutine is done; many threads' calls run concurrently on this loop.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


class Portal:
    """One event loop in a daemon thread, started on first use (again in a forked child)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0
        self._at_exit: list[Callable[[], Awaitable[None]]] = []

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="pgsched-admin")
                thread.daemon = True  # a caller's exit does not wait for it
                thread.start()
                self._loop, self._pid = loop, os.getpid()
                self._at_exit = []
            return self._loop

    def owns_running_loop(self) -> bool:
        """Whether the caller is a coroutine on this portal's loop."""
        try:
            return asyncio.get_running_loop() is self._loop and self._pid == os.getpid()
        except RuntimeError:
            return False

    def call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        """Run ``coro`` on the portal's loop and return its result (or raise its error)."""
        future = asyncio.run_coroutine_threadsafe(coro, self._running())
        try:
            return future.result()
        except BaseException:
            future.cancel()  # an interrupted caller does not leave its operation running
            raise

    def on_exit(self, cleanup: Callable[[], Awaitable[None]]) -> None:
        """Run ``cleanup`` on the loop when the interpreter exits (closing kept connections,
        so the server sees a clean goodbye rather than a dropped socket)."""
        with self._lock:
            self._at_exit.append(cleanup)

    def _shutdown(self) -> None:
        with self._lock:
            loop, cleanups, self._at_exit = self._loop, self._at_exit, []
        if loop is None or self._pid != os.getpid() or not cleanups:
            return

        async def run_all() -> None:
            for cleanup in cleanups:
                with contextlib.suppress(Exception):  # exiting: a failed goodbye changes nothing
                    await cleanup()

        with contextlib.suppress(Exception):  # the loop is stuck: the OS closes the sockets
            asyncio.run_coroutine_threadsafe(run_all(), loop).result(timeout=5)


PORTAL = Portal()
atexit.register(PORTAL._shutdown)
