"""How an execution ended, as the replica will write it: the :class:`~.values.Outcome` of what
a handler returned or raised. Pure: no I/O, no engine state.
"""

from __future__ import annotations

import time

from .._results import encode_result
from .values import Lease, Outcome


def elapsed_ms(started: float) -> int:
    """Milliseconds since the monotonic instant ``started``, capped to an ``integer`` column."""
    return min(int((time.monotonic() - started) * 1000), 2**31 - 1)


def succeeded(started: float, value: object) -> Outcome:
    """SUCCESS with the handler's return value; raises ``InvalidResult`` if it cannot be
    stored (None, an int, or a ``Result`` of at most 16 KiB of JSON)."""
    encoded = encode_result(value)
    return Outcome(
        "SUCCESS",
        elapsed_ms(started),
        rows_affected=encoded.rows_affected,
        result_json=encoded.result_json,
    )


def failed(
    lease: Lease,
    started: float,
    code: str,
    message: str,
    *,
    retry_now: bool = False,
    traceback: str | None = None,
    error: BaseException | None = None,
) -> Outcome:
    """FAILED with ``code`` (and the handler's ``traceback``, if it raised); the job's backoff
    decides when it is retried (``retry_now``: at once, for a run abandoned at shutdown), None
    when no attempt is left. A row once stolen after a crash has one attempt more: the steal's,
    so the crash does not use up one of the handler's retries."""
    run = lease.run
    allowed = run.max_attempts + (1 if lease.stolen else 0)
    delay = lease.job.retry_delay(run.attempt, allowed)
    return Outcome(
        "FAILED",
        elapsed_ms(started),
        error_code=code,
        error_msg=message,
        retry_delay_s=None if delay is None else 0.0 if retry_now else delay.total_seconds(),
        traceback=traceback,
        error=error,
    )
