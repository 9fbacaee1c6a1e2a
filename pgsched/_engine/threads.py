"""The threads sync handlers (and sync hooks) run in: daemon threads, each kept a while once
idle so the next run starts on it. Starting a thread makes the starter wait until the new
thread first holds the GIL, which in a process running many handlers at once takes a switch
interval or more each time: on the event loop's thread, that wait delayed every claim and
publish behind a burst of runs. A run never waits for a free thread (a new one starts), so a
handler abandoned at ``run_timeout`` only keeps its own thread, and no pool bound can be
exhausted by handlers that hang; daemon threads cannot keep the process alive."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

# A thread idle this long ends: a job every few seconds keeps its threads, a burst's extra
# ones go once it has passed.
IDLE_S = 30.0


class HandlerThreads:
    """Runs callables on idle threads of its own, or on a new one when none is idle."""

    def __init__(self, idle_s: float = IDLE_S) -> None:
        self._idle_s = idle_s
        self._work: queue.SimpleQueue[tuple[Callable[[], None], str]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for work, less the work handed to them not yet taken

    def submit(self, fn: Callable[[], None], name: str) -> None:
        """Run ``fn`` on a thread named ``name`` (a run's thread is named after its job)."""
        with self._lock:
            if self._idle > 0:
                self._idle -= 1
                self._work.put((fn, name))
                return
        threading.Thread(target=self._serve, args=(fn,), name=name, daemon=True).start()

    def _serve(self, fn: Callable[[], None]) -> None:
        while True:
            fn()  # the callables catch what they raise: a thread never dies of a run
            with self._lock:
                self._idle += 1
            taken = self._take()
            if taken is None:
                return
            fn, threading.current_thread().name = taken

    def _take(self) -> tuple[Callable[[], None], str] | None:
        """The next work for this idle thread, or None once it has been idle too long (and
        no work was handed to it meanwhile)."""
        while True:
            try:
                return self._work.get(timeout=self._idle_s)
            except queue.Empty:
                with self._lock:
                    if self._work.empty():
                        self._idle -= 1
                        return None
