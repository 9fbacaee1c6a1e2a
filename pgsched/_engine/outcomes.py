"""How an execution ended, as the replica will write it: :class:`Outcome` values, made from what
a handler returned or raised. Pure: no I/O, no engine state.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

from .._config import JobSpec
from .._model import Run
from .._results import encode_result
from .._storage.store import Finish

Status = Literal["SUCCESS", "FAILED"]


@dataclass(frozen=True, slots=True)
class Outcome:
    """The terminal write of one execution (before its lease token guards it)."""

    status: Status
    duration_ms: int
    error_code: str | None = None
    error_msg: str | None = None
    rows_affected: int | None = None
    result_json: str | None = None
    retry_delay_s: float | None = None  # FAILED: the delay before the next attempt, if any

    def finish(self, run: Run) -> Finish:
        """The row write for ``run``, guarded by its lease token."""
        return Finish(
            run.execution_id,
            run.lease_token,
            self.status,
            self.error_code,
            self.error_msg,
            self.rows_affected,
            self.result_json,
            self.duration_ms,
            self.retry_delay_s,
        )


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
    job: JobSpec, run: Run, started: float, code: str, message: str, *, retry_now: bool = False
) -> Outcome:
    """FAILED with ``code``; the job's backoff decides when it is retried (``retry_now``: at
    once, for a run abandoned at shutdown), None when no attempt is left."""
    delay = job.retry_delay(run.attempt, run.max_attempts)
    return Outcome(
        "FAILED",
        elapsed_ms(started),
        error_code=code,
        error_msg=message,
        retry_delay_s=None if delay is None else 0.0 if retry_now else delay.total_seconds(),
    )
