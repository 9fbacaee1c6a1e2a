"""Waiting for a condition with a deadline: a test waits for what it means, never sleeps and
hopes (README, "Working on the tests")."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, TypeVar

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T | Literal[False] | None],
    timeout: float,
    message: str | Callable[[], str],
    *,
    interval: float = 0.1,
) -> T:
    """Poll ``condition`` until it returns something truthy, and return that (never None or
    False, so the type says neither); fail with ``message`` (what was waited for, or a
    function saying what is still missing) once ``timeout`` seconds have passed. An exception
    in ``condition`` ends the wait at once (so a replica that died says so instead of timing
    out)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            what = message() if callable(message) else message
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def holds_for(
    condition: Callable[[], object], seconds: float, message: str, *, interval: float = 0.1
) -> None:
    """Fail with ``message`` as soon as ``condition`` is falsy within the next ``seconds``
    (the converse of :func:`wait_until`: something that must not happen, watched for a
    stated time)."""
    deadline = time.monotonic() + seconds
    while True:
        assert condition(), message
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)
