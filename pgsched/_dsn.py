"""Where the DSN comes from, and keeping its password out of every output."""

from __future__ import annotations

import os
from collections.abc import Mapping

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from ._errors import ConfigError
from ._secrets import redact, remember_secrets


def resolve_dsn(explicit: str | None) -> str | None:
    """``explicit``, else ``PGSCHED_DSN``, else ``DATABASE_URL``, else None.

    The DSN's password is remembered so that :func:`redact` masks it wherever it appears.
    """
    for candidate in (explicit, os.environ.get("PGSCHED_DSN"), os.environ.get("DATABASE_URL")):
        if candidate:
            remember_secrets(candidate)
            return candidate
    return None


def require_dsn(dsn: str | None) -> str:
    """``dsn``, checked for syntax (libpq's message, password redacted, if it is bad), or a
    :class:`ConfigError` saying no database is configured."""
    if not dsn:
        raise ConfigError(
            "no database configured: pass dsn= (--dsn), or set PGSCHED_DSN or DATABASE_URL"
        )
    try:
        conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"invalid DSN: {redact(str(exc))}") from None
    return dsn


def conninfo_of(params: Mapping[str, str], *, source: str) -> str:
    """libpq's conninfo string of ``params`` (libpq's keywords: host, dbname, sslmode...),
    checked by libpq; its password is remembered so that :func:`redact` masks it. A keyword
    libpq does not know is a :class:`ConfigError` naming ``source`` (where they came from)."""
    try:
        dsn = make_conninfo("", **params)
    except psycopg.ProgrammingError as exc:
        raise ConfigError(f"{source}: {' '.join(redact(str(exc)).split())}") from None
    remember_secrets(dsn)
    return dsn


_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


def resolve_transaction_pooling(explicit: bool | None) -> bool:
    """``explicit``, else ``PGSCHED_TRANSACTION_POOLING`` (1/true/yes/on or 0/false/no/off)."""
    return _flag(explicit, "transaction_pooling", "PGSCHED_TRANSACTION_POOLING")


def resolve_synchronous_claims(explicit: bool | None) -> bool:
    """``explicit``, else ``PGSCHED_SYNCHRONOUS_CLAIMS`` (1/true/yes/on or 0/false/no/off)."""
    return _flag(explicit, "synchronous_claims", "PGSCHED_SYNCHRONOUS_CLAIMS")


def _flag(explicit: bool | None, name: str, variable: str) -> bool:
    if explicit is not None:
        if not isinstance(explicit, bool):
            raise ConfigError(f"{name}={explicit!r} must be True or False")
        return explicit
    raw = os.environ.get(variable, "")
    if raw.strip().lower() in _TRUE:
        return True
    if raw.strip().lower() in _FALSE:
        return False
    raise ConfigError(f"{variable}={raw!r} must be 1 or 0 (true or false)")
