"""Where the DSN comes from, and keeping its password out of every output."""

from __future__ import annotations

import os
import re
from urllib.parse import unquote

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ._errors import ConfigError

_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^@\s]*)(?=@)", re.I)
_KV_PASSWORD = re.compile(
    r"(?P<head>\b(?:ssl)?password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|(?:\\.|\S)+)", re.I
)


_URL_USERINFO = re.compile(r"^[a-z][a-z0-9+.-]*://([^/?#]*)@", re.I)
# Passwords of every DSN pgsched has resolved: libpq quotes pieces of a malformed DSN in its
# errors ("invalid percent-encoded token: ..."), which the patterns above cannot recognise.
_KNOWN_SECRETS: set[str] = set()
_MIN_SECRET = 4  # masking shorter strings would garble unrelated text


def resolve_dsn(explicit: str | None) -> str | None:
    """``explicit``, else ``PGSCHED_DSN``, else ``DATABASE_URL``, else None.

    The DSN's password is remembered so that :func:`redact` masks it wherever it appears.
    """
    for candidate in (explicit, os.environ.get("PGSCHED_DSN"), os.environ.get("DATABASE_URL")):
        if candidate:
            remember_secrets(candidate)
            return candidate
    return None


def remember_secrets(text: str) -> None:
    """Mask the passwords of ``text`` (a DSN, or any argument that may be one) wherever
    :func:`redact` later sees them, even in a garbled or partial quotation."""
    _KNOWN_SECRETS.update(p for p in _passwords_in(text) if len(p) >= _MIN_SECRET)


def _passwords_in(dsn: str) -> set[str]:
    found: set[str] = set()
    match = _URL_USERINFO.match(dsn.strip())
    if match and ":" in match[1]:
        raw = match[1].split(":", 1)[1]
        found.update({raw, unquote(raw)})
    for kv in _KV_PASSWORD.finditer(dsn):
        value = kv["pw"]
        if value.startswith("'") and value.endswith("'"):
            value = value[1:-1]
        found.update({value, value.split("&", 1)[0], re.sub(r"\\(.)", r"\1", value)})
    return {p for p in found if p}


def redact(text: str) -> str:
    """``text`` with every DSN password (URL or ``password=`` form, or any password of a DSN
    pgsched resolved) replaced by ``***``."""
    # Every log event's every string comes here: the patterns run only on text that can
    # match them (a URL has "://", a password= pair has "="), which most never does.
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: m["head"] + "***", text)
    if "=" in text:
        text = _KV_PASSWORD.sub(lambda m: m["head"] + "***", text)
    if _KNOWN_SECRETS:
        for secret in sorted(_KNOWN_SECRETS, key=len, reverse=True):
            text = text.replace(secret, "***")
    return text


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
