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
    # 64 KiB blocks come from the heap (below glibc's mmap threshold), every page written so
    # that it is resident. Every other one is freed: each leaves a hole between two blocks in
    # use, which the heap cannot give back by shrinking from its top; only a trim can.
    blocks = []
    for _ in range(960):
        block = bytearray(64 * 1024)
        block[::4096] = b"x" * 16
        blocks.append(block)
    kept = blocks[1::2]
    del blocks, block
    before = _resident()
    assert release_free_heap() is True
    assert before - _resident() >= 20 * _MB  # of the 30 MiB freed
    assert all(b[0] == ord("x") for b in kept)
