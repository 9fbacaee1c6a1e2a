"""Freed heap pages given back to the operating system after a one-off burst of allocations.

A replica's first sight of a large fan-out builds a value per scope (keys, due times, the
statement's parameters) once, then frees it. glibc keeps the freed pages of its heap for
reuse, and a fragmented heap is only shrunk from its top: with 100,000 scopes about 20 MB
stayed resident after the write, under every later peak. ``malloc_trim`` returns them.
Elsewhere (another C library, another system) this does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any

# Below this many scopes a sighting allocates too little for a trim to matter.
TRIM_AFTER_SCOPES = 10_000


@functools.cache
def _malloc_trim() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)  # the C library the interpreter runs on
    except OSError:
        return None
    return getattr(libc, "malloc_trim", None)  # glibc's; musl has none


def release_free_heap() -> bool:
    """Return the heap's free pages to the system; False where that cannot be done."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
