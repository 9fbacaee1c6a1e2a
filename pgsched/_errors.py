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
