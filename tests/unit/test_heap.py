"""Freed heap pages go back to the system after a burst of allocations (a first sight of a
large fan-out), where the C library can do it."""

from __future__ import annotations

import os

from pgsched._engine.heap import _malloc_trim, release_free_heap

_MB = 1 << 20


def _resident() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_freed_heap_pages_go_back_to_the_system() -> None:
    if _malloc_trim() is None:  # not glibc: nothing to call, and it says so
        assert release_free_heap() is False
        return
    # 64 KiB blocks come from the heap (below glibc's mmap threshold), written so that
    # their pages are resident; one block allocated after them keeps the heap's top in use,
    # so freeing them leaves free pages that only a trim gives back.
    blocks = [bytearray(b"x" * (64 * 1024)) for _ in range(480)]
    pin = bytearray(b"y" * (64 * 1024))
    del blocks
    before = _resident()
    assert release_free_heap() is True
    assert before - _resident() >= 15 * _MB
    assert pin[0] == ord("y")
