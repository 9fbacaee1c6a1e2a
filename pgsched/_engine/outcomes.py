"""How an execution ended, as the replica will write it: the :class:`~.values.Outcome` of what
a handler returned or raised. Pure: no I/O, no engine state.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from .._errors import describe_error, describe_traceback
from .._structures import Result
from .values import Lease, Outcome

MAX_RESULT_BYTES = 16 * 1024
# A NUL is encoded as \u0000 after an even number of backslashes (an odd number means the
# backslash itself was escaped, i.e. the text "\u0000", which is harmless).
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


class InvalidResult(Exception):
    """The handler's return value cannot be stored."""


@dataclass(frozen=True, slots=True)
class Encoded:
    rows_affected: int | None
    result_json: str | None


def encode_result(value: object) -> Encoded:
    """Validate a handler's return value: ``None``, an ``int`` or a :class:`Result`.

    ``Result.data`` must be JSON (no NaN or infinity, no NUL characters, PostgreSQL's jsonb
    refuses both) and at most 16 KiB encoded; otherwise :class:`InvalidResult` is raised.
    """
    if value is None:
        return Encoded(None, None)
    if isinstance(value, int) and not isinstance(value, bool):
        return Encoded(_rows(value), None)
    if isinstance(value, Result):
        rows = value.rows_affected
        if not isinstance(rows, int) or isinstance(rows, bool):
            raise InvalidResult(f"Result.rows_affected={rows!r} is not an integer")
        try:
            text = json.dumps(value.data, allow_nan=False, ensure_ascii=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise InvalidResult(f"Result.data is not JSON-serialisable: {exc}") from None
        # A character is at least one byte: a text this long is too big whatever it holds,
        # and saying so first spares scanning megabytes for NULs.
        if len(text) > MAX_RESULT_BYTES:
            raise InvalidResult(
                f"Result.data is at least {len(text)} bytes encoded; the limit is 16 KiB"
            )
        if _ESCAPED_NUL.search(text):
            raise InvalidResult("Result.data contains a NUL character")
        try:
            size = len(text.encode())
        except UnicodeEncodeError:
            raise InvalidResult("Result.data is not valid Unicode (lone surrogate)") from None
        if size > MAX_RESULT_BYTES:
            raise InvalidResult(f"Result.data is {size} bytes encoded; the limit is 16 KiB")
        return Encoded(_rows(rows), text)
    raise InvalidResult(
        f"handler returned {type(value).__name__}; expected None, int or pgsched.Result"
    )


def _rows(value: int) -> int:
    if not -(2**63) <= value < 2**63:
        raise InvalidResult(f"rows_affected={value} does not fit a bigint")
    return value


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


class Failure(NamedTuple):
    """Why an attempt failed: its error code and message, and the exception that ended it
    (whose traceback is kept, and which ``on_failure`` receives), if any."""

    code: str
    message: str
    error: BaseException | None = None


def failed(lease: Lease, started: float, failure: Failure, *, retry_now: bool = False) -> Outcome:
    """FAILED as ``failure`` says (with its exception's traceback, if it raised); the job's
    backoff decides when it is retried (``retry_now``: at once, for a run abandoned at
    shutdown), None when no attempt is left. A row once stolen after a crash has one attempt
    more: the steal's, so the crash does not use up one of the handler's retries."""
    run = lease.run
    allowed = run.max_attempts + (1 if lease.stolen else 0)
    delay = lease.job.retry_delay(run.attempt, allowed)
    error = failure.error
    return Outcome(
        "FAILED",
        elapsed_ms(started),
        error_code=failure.code,
        error_msg=failure.message,
        retry_delay_s=None if delay is None else 0.0 if retry_now else delay.total_seconds(),
        traceback=None
        if error is None or error.__traceback__ is None
        else describe_traceback(error),
        error=error,
    )


def marked(lease: Lease, started: float, *, strict: bool, rolled_back: bool) -> Outcome | None:
    """The outcome the handler marked on ``lease``'s run (``run.succeed`` / ``run.fail``);
    None when it marked none, or marked a success that ``rolled_back`` undid (a transactional
    batch that raised: its effects did not commit). A success whose result cannot be stored
    is FAILED ``invalid_result``, or with ``strict`` (a transaction about to commit) raises
    ``InvalidResult`` so that nothing commits."""
    mark = lease.run.mark
    if mark is None:
        return None
    if mark.succeeded:
        if rolled_back:
            return None
        try:
            return succeeded(started, mark.value)
        except Exception as exc:  # InvalidResult, or anything odd a custom object raises
            why = f"run.succeed(): {describe_error(exc)}"
            if strict:
                raise InvalidResult(why) from exc
            return failed(lease, started, Failure("invalid_result", why))
    error = mark.value
    if isinstance(error, BaseException):
        return failed(lease, started, Failure("handler_error", describe_error(error), error))
    return failed(lease, started, Failure("handler_error", str(error)))


def returned(
    leases: Sequence[Lease], started: float, value: object, *, strict: bool
) -> list[Outcome]:
    """The outcomes of a handler that returned ``value``: a single run's is its mark, else
    SUCCESS with ``value``; a batch's runs keep their marks and the unmarked ones succeed, the
    handler having returned None. Raises ``InvalidResult`` for a value that cannot be stored
    (and, ``strict``, for a mark's)."""
    if leases[0].job.batch_size is None:
        lease = leases[0]
        return [
            marked(lease, started, strict=strict, rolled_back=False) or succeeded(started, value)
        ]
    if value is not None:
        raise InvalidResult(
            f"batch handler returned {type(value).__name__}; expected None"
            " (a run's result is given with run.succeed(result))"
        )
    return [
        marked(lease, started, strict=strict, rolled_back=False) or succeeded(started, None)
        for lease in leases
    ]


def ended(
    leases: Sequence[Lease], started: float, failure: Failure, *, rolled_back: bool = False
) -> list[Outcome]:
    """The outcomes of a handler that raised, timed out or returned what cannot be stored:
    each run's mark stands (its success too, unless ``rolled_back``), the rest are FAILED as
    ``failure`` says."""
    return [
        marked(lease, started, strict=False, rolled_back=rolled_back)
        or failed(lease, started, failure)
        for lease in leases
    ]
