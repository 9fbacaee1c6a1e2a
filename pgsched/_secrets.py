"""Keeping passwords out of every output: the DSN passwords pgsched has seen, and the
redaction every log line, error message and traceback goes through."""

from __future__ import annotations

import re
from urllib.parse import unquote

_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^@\s]*)(?=@)", re.I)
_KV_PASSWORD = re.compile(
    r"(?P<head>\b(?:ssl)?password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|(?:\\.|\S)+)", re.I
)


_URL_USERINFO = re.compile(r"^[a-z][a-z0-9+.-]*://([^/?#]*)@", re.I)
# Passwords of every DSN pgsched has resolved: libpq quotes pieces of a malformed DSN in its
# errors ("invalid percent-encoded token: ..."), which the patterns above cannot recognise.
_KNOWN_SECRETS: set[str] = set()
_MIN_SECRET = 4  # masking shorter strings would garble unrelated text


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
