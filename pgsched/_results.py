"""Turning what a handler returned or raised into the columns of its terminal row."""

from __future__ import annotations

import json
import re
import traceback
from dataclasses import dataclass

from ._dsn import redact
from ._model import Result

MAX_RESULT_BYTES = 16 * 1024
# A NUL is encoded as \u0000 after an even number of backslashes (an odd number means the
# backslash itself was escaped, i.e. the text "\u0000", which is harmless).
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
MAX_ERROR_CHARS = 4000
MAX_TRACEBACK_BYTES = 16 * 1024
_CUT = "... (traceback cut to its last 16 KiB)\n"


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


def describe_error(exc: BaseException) -> str:
    """``Type: message``, DSN passwords redacted, cut to what ``error_msg`` holds. An error
    of one of pgsched's own statements names it: ``... (statement due_cursors)``."""
    text = f"{type(exc).__name__}: {exc}"
    statement = getattr(exc, "pgsched_statement", None)  # set by the storage layer
    if statement is not None:
        text += f" (statement {statement})"
    text = redact(text).replace("\x00", "\\0")
    # Lone surrogates (from undecodable file names, say) cannot be sent as UTF-8.
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text[:MAX_ERROR_CHARS]


def describe_traceback(exc: BaseException) -> str:
    """The formatted traceback of ``exc``, DSN passwords redacted, cut to its last 16 KiB
    (the end names the frame that raised and the error, the part an operator reads first)."""
    text = redact("".join(traceback.format_exception(exc))).replace("\x00", "\\0")
    data = text.encode("utf-8", "backslashreplace")
    if len(data) <= MAX_TRACEBACK_BYTES:
        return data.decode("utf-8")
    keep = MAX_TRACEBACK_BYTES - len(_CUT.encode())
    return _CUT + data[-keep:].decode("utf-8", "ignore")
