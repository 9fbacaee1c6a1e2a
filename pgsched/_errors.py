"""Exceptions raised by pgsched. Every one derives from :class:`PgschedError`."""

from __future__ import annotations


class PgschedError(Exception):
    """Root of every error pgsched raises on purpose."""


class ConfigError(PgschedError, ValueError):
    """A job or scheduler option is invalid; the message names the job, the field and the value."""


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
