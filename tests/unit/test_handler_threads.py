"""The threads sync handlers run on: reused once idle, never waited for, ended when idle."""

from __future__ import annotations

import threading

from pgsched._engine.threads import HandlerThreads
from tests.support.waiting import wait_until


def _run(threads: HandlerThreads, name: str, hold: threading.Event | None = None) -> int:
    """Submit one run and return the id of the thread it ran on."""
    ran: list[int] = []
    done = threading.Event()

    def fn() -> None:
        ran.append(threading.get_ident())
        done.set()
        if hold is not None:
            hold.wait(10)

    threads.submit(fn, name)
    assert done.wait(10), "the run never started"
    return ran[0]


def test_an_idle_thread_takes_the_next_run_and_is_named_after_it() -> None:
    threads = HandlerThreads(idle_s=10)
    first = _run(threads, "pgsched:a")
    wait_until(lambda: threads._idle == 1, 5, "the thread to be idle")
    names: list[str] = []
    done = threading.Event()

    def named() -> None:
        names.append(threading.current_thread().name)
        done.set()

    threads.submit(named, "pgsched:b")
    assert done.wait(10)
    assert names == ["pgsched:b"]
    assert _run(threads, "pgsched:c") == first  # still the one thread


def test_a_run_never_waits_for_a_busy_thread() -> None:
    threads = HandlerThreads(idle_s=10)
    hold = threading.Event()
    try:
        stuck = _run(threads, "pgsched:stuck", hold)  # a handler that hangs
        assert _run(threads, "pgsched:next") != stuck  # a new thread took the next run
    finally:
        hold.set()


def test_an_idle_thread_ends_after_its_idle_time() -> None:
    threads = HandlerThreads(idle_s=0.2)
    ident = _run(threads, "pgsched:once")
    wait_until(
        lambda: all(t.ident != ident for t in threading.enumerate()), 10, "the idle thread to end"
    )
    assert threads._idle == 0
    _run(threads, "pgsched:again")  # a new thread takes the next run
