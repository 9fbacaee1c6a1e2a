"""Job options the tests share, typed as what they are: a TypedDict of only the keys it sets
unpacks into ``Scheduler.job``/``register`` beside explicit keywords (an annotation of
``pgsched.JobOptions`` would let every key overlap them)."""

from __future__ import annotations

from typing import TypedDict


class LeaseTimes(TypedDict):
    """The three durations of a run's lease."""

    run_timeout: str
    stale_timeout: str
    heartbeat_interval: str
