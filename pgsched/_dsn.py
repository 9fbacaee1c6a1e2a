"""Where the DSN comes from, and keeping its password out of every output."""

from __future__ import annotations

import os
import re

_URL_PASSWORD = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)(?P<pw>[^@\s]*)(?=@)", re.I)
_KV_PASSWORD = re.compile(
    r"(?P<head>\b(?:ssl)?password\s*=\s*)(?P<pw>'(?:[^'\\]|\\.)*'|(?:\\.|\S)+)", re.I
)


def resolve_dsn(explicit: str | None) -> str | None:
    """``explicit``, else ``PGSCHED_DSN``, else ``DATABASE_URL``, else None."""
    for candidate in (explicit, os.environ.get("PGSCHED_DSN"), os.environ.get("DATABASE_URL")):
        if candidate:
            return candidate
    return None


def redact(text: str) -> str:
    """``text`` with every DSN password (URL or ``password=`` form) replaced by ``***``."""
    text = _URL_PASSWORD.sub(lambda m: m["head"] + "***", text)
    return _KV_PASSWORD.sub(lambda m: m["head"] + "***", text)
