"""Exceptions raised by pgsched (every one derives from :class:`PgschedError`), and how any
error is told in a row, a log line or a response: one line, passwords redacted."""

from __future__ import annotations

import traceback
from collections.abc import Callable, Mapping

from ._secrets import redact

MAX_ERROR_CHARS = 4000
MAX_TRACEBACK_BYTES = 16 * 1024
_CUT = "... (traceback cut to its last 16 KiB)\n"


class PgschedError(Exception):
    """Root of every error pgsched raises on purpose."""


class ConfigError(PgschedError, ValueError):
    """A job or scheduler option is invalid; the message names the job, the field and the value."""


class FieldError(ConfigError):
    """A :class:`ConfigError` whose message suggests fields of the call (``{name}``
    placeholders of ``template``, each with the value to give): the Python API, the command
    line and the HTTP API each word a field their own way (:meth:`worded`); ``str()`` is the
    Python API's wording (``all_scopes=True``)."""

    def __init__(self, template: str, fields: Mapping[str, object]) -> None:
        self.template, self.fields = template, dict(fields)
        super().__init__(self.worded(python_field))

    def worded(self, word: Callable[[str, object], str]) -> str:
        """The message with each field worded by ``word(name, value)``. Only the fields'
        placeholders are filled (not ``str.format``): the job's name or a scope may hold
        braces."""
        text = self.template
        for name, value in self.fields.items():
            text = text.replace("{" + name + "}", word(name, value))
        return text


def python_field(name: str, value: object) -> str:
    """A field as a keyword argument of the Python API: ``all_scopes=True``."""
    return f"{name}={value!r}"


class LeaseLost(PgschedError):
    """The execution's lease was stolen or closed; nothing the handler does now will be recorded."""


class AppLoadError(PgschedError):
    """The APP argument of the command line could not be imported or holds no scheduler."""


class NotFoundError(PgschedError):
    """A named job or execution does not exist."""


class DatabaseError(PgschedError):
    """The database could not be reached, or refused a statement: one line naming its host
    (never a password); the driver's exception is the ``__cause__``."""


class RunFailed(PgschedError):
    """An attempt that ended FAILED without an exception of the handler's own: what a failure
    hook (``on_failure``) receives then. ``error_code`` is the row's."""

    error_code = "failed"


class RunTimeout(RunFailed, TimeoutError):
    """The handler ran longer than its job's ``run_timeout``."""

    error_code = "run_timeout"


class RunAbandoned(RunFailed):
    """The replica shut down before the handler finished (retryable at once)."""

    error_code = "shutdown"


class StaleLease(RunFailed):
    """The holder's lease went stale (its replica died or stopped renewing) and the row was
    closed FAILED by another replica's claim."""

    error_code = "stale_timeout"


class UnstorableResult(RunFailed):
    """The handler's return value could not be stored (``invalid_result``)."""

    error_code = "invalid_result"


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
