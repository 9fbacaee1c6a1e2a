"""Schedulers and functions run in threads for the length of a test: ``running`` (and
``serving``, with its HTTP server), a barrier-released group, a record of what a handler saw,
and waiting for a replica's next whole tick."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pgsched
from tests.support.waiting import wait_until


def run_together(fns: list[Callable[[], Any]], timeout: float = 60) -> list[Any]:
    """Start ``fns`` in threads released together by a barrier; return results in order.

    Any exception in a thread is re-raised here.
    """
    barrier = threading.Barrier(len(fns))
    results: list[Any] = [None] * len(fns)
    errors: list[BaseException] = []

    def target(i: int, fn: Callable[[], Any]) -> None:
        try:
            barrier.wait(timeout)
            results[i] = fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [
        threading.Thread(target=target, args=(i, fn), daemon=True) for i, fn in enumerate(fns)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread did not finish in time"
    if errors:
        raise errors[0]
    return results


@contextmanager
def _in_thread(
    scheduler: pgsched.Scheduler, stop_timeout: float, **run_options: Any
) -> Iterator[threading.Thread]:
    """``scheduler.run(**run_options)`` in a thread for the block; stopped and joined after,
    and whatever ``run()`` raised is raised here."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            scheduler.run(**run_options)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name=f"run-{scheduler.runner_id}", daemon=True)
    thread.start()
    try:
        yield thread
    finally:

        def stopped() -> bool:
            scheduler.stop()  # repeated: a stop() before run() has started is not kept
            thread.join(0.2)
            return not thread.is_alive()

        wait_until(stopped, stop_timeout, "the scheduler thread to stop", interval=0.05)
    assert not errors, f"run() raised {errors[0]!r}"


@contextmanager
def running(scheduler: pgsched.Scheduler, stop_timeout: float = 30) -> Iterator[threading.Thread]:
    """``scheduler.run()`` in a thread for the duration of the block; stopped and joined after."""
    with _in_thread(scheduler, stop_timeout) as thread:
        yield thread


@contextmanager
def serving(scheduler: pgsched.Scheduler, stop_timeout: float = 30) -> Iterator[int]:
    """``scheduler.run(http_port=0)`` in a thread; yields its HTTP port; stopped after."""
    with _in_thread(scheduler, stop_timeout, http_port=0):
        port = wait_until(lambda: scheduler.http_port, 15, "the HTTP server")
        assert port is not None
        yield port


class Recorder:
    """Thread-safe record of the Runs a handler saw, plus its peak concurrency."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.runs: list[pgsched.Run] = []
        self.active = 0
        self.peak = 0

    def enter(self, run: pgsched.Run) -> None:
        with self.lock:
            self.runs.append(run)
            self.active += 1
            self.peak = max(self.peak, self.active)

    def leave(self) -> None:
        with self.lock:
            self.active -= 1

    def __len__(self) -> int:
        with self.lock:
            return len(self.runs)


def wait_for_fresh_tick(s: pgsched.Scheduler, timeout: float = 10) -> None:
    """Wait until ``s.run()`` has completed a whole tick that started after this call."""
    marker = time.monotonic()

    def ticked_after(t: float) -> float | None:
        runtime = s._runtime
        last = runtime.last_tick_ok if runtime is not None else None
        return last if last is not None and last > t else None

    first_end = wait_until(lambda: ticked_after(marker), timeout, "a tick", interval=0.02)
    assert first_end is not None
    wait_until(lambda: ticked_after(first_end), timeout, "a further tick", interval=0.02)
