"""Run deadlines: each running attempt's ``run_timeout``, kept for the executor, which arms one
when an attempt starts and disarms it when the attempt ends. A deadline that passes cancels
the attempt's task, as ``asyncio.timeout`` would; owns no other state.

Why not ``asyncio.timeout`` per attempt: it costs a timer handle in the event loop's heap for
each run (and a heap rebuild when half of them are cancelled), about as much as starting the
run's task. Here the attempts of one ``run_timeout`` fall due in the order they started, so
each duration's deadlines are a FIFO queue and one loop timer waits for the earliest.
"""

from __future__ import annotations

import asyncio
from collections import deque

from .values import Lease

# Disarmed entries are dropped from a queue once they outnumber the armed ones by this much:
# the queues stay within about twice the attempts running.
_SLACK = 1_024


class RunDeadlines:
    """The deadlines of the attempts running on one event loop."""

    def __init__(self) -> None:
        self._queues: dict[float, deque[tuple[float, Lease]]] = {}  # run_timeout s -> FIFO
        self._armed: dict[Lease, float] = {}  # lease -> its attempt's deadline (loop time)
        self._expired: set[Lease] = set()  # leases whose attempt this cancelled, until disarmed
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the timer's

    def arm(self, lease: Lease, seconds: float) -> None:
        """Cancel ``lease.task`` ``seconds`` from now unless :meth:`disarm` comes first."""
        loop = asyncio.get_running_loop()
        at = loop.time() + seconds
        self._armed[lease] = at
        queue = self._queues.get(seconds)
        if queue is None:
            queue = self._queues[seconds] = deque()
        queue.append((at, lease))
        if len(queue) > 2 * len(self._armed) + _SLACK:
            self._queues[seconds] = deque(e for e in queue if self._armed.get(e[1]) == e[0])
        if self._timer is None or self._loop is not loop or at < self._timer.when():
            self._schedule(loop, at)

    def disarm(self, lease: Lease) -> bool:
        """The attempt ended (or is ending): True, once, when its deadline cancelled it; the
        cancellation request is withdrawn (``Task.uncancel``), as ``asyncio.timeout`` does."""
        self._armed.pop(lease, None)
        if lease not in self._expired:
            return False
        self._expired.discard(lease)
        if lease.task is not None:
            lease.task.uncancel()
        return True

    def _schedule(self, loop: asyncio.AbstractEventLoop, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._loop = loop.call_at(at, self._expire, loop), loop

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Cancel every attempt past its deadline; wait for the earliest one left."""
        self._timer = None
        now, earliest = loop.time(), None
        for queue in self._queues.values():
            while queue:
                at, lease = queue[0]
                if self._armed.get(lease) != at:  # disarmed, or re-armed for a later attempt
                    queue.popleft()
                elif at <= now:
                    queue.popleft()
                    del self._armed[lease]
                    self._expired.add(lease)
                    if lease.task is not None:
                        lease.task.cancel()
                else:
                    earliest = at if earliest is None else min(earliest, at)
                    break
        if earliest is not None:
            self._schedule(loop, earliest)
