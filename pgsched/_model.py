"""The values every layer shares: the ledger's keys (job names and scopes) and results."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from ._errors import ConfigError

Trigger = Literal["schedule", "manual", "backfill"]
MAX_SCOPE_BYTES = 1024
# Unicode category Cc, exactly: C0 controls, DEL and C1 controls. A newline or tab in a job
# name or scope reads as two names in every table, log line and URL that shows it, and NUL
# cannot be stored at all.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_CONTROL_NAMES = {"\x00": "NUL", "\t": "tab", "\n": "newline", "\r": "carriage return"}


def control_character(value: str) -> str | None:
    """How the first control character (category Cc) of ``value`` is called, or None."""
    found = _CONTROL.search(value)
    if found is None:
        return None
    char = found.group()
    return _CONTROL_NAMES.get(char, f"U+{ord(char):04X}")


@dataclass(frozen=True, slots=True, order=True)
class Scope:
    """What a job runs for: ``Scope("tenant", "42")``. Integer ids are stored as text."""

    kind: str
    id: str

    def __post_init__(self) -> None:
        for name in ("kind", "id"):
            value = getattr(self, name)
            if isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, name, str(value))
            elif not isinstance(value, str):
                raise ConfigError(f"Scope {name}={value!r} must be a string")
            value = getattr(self, name)
            if value == "":
                raise ConfigError(f"Scope {name} must not be empty")
            control = control_character(value)
            if control is not None:
                shown = repr(value) if len(value) <= 80 else f"{value[:80]!r}..."
                raise ConfigError(f"Scope {name}={shown} contains a control character ({control})")
            try:
                size = len(value.encode("utf-8"))
            except UnicodeEncodeError:
                raise ConfigError(f"Scope {name}={value!r} is not valid Unicode") from None
            if size > MAX_SCOPE_BYTES:
                # The unique key (job, kind, id, plan_time) is a btree entry, whose size
                # PostgreSQL caps near 2.7 kB; two 1 kB parts and a job name fit.
                raise ConfigError(
                    f"Scope {name}={value[:40]!r}... is {size} bytes; the limit is "
                    f"{MAX_SCOPE_BYTES} bytes of UTF-8"
                )

    @classmethod
    def parse(cls, text: str, job: str | None = None, *, field: str = "scope") -> Scope:
        """Parse ``KIND:ID`` as written on the command line (the id may contain colons); an
        error names ``job`` when given, and the ``field`` that held ``text``."""
        where = "" if job is None else f"job {job!r}: "
        kind, sep, ident = text.partition(":")
        if not sep or not kind or not ident:
            raise ConfigError(f"{where}{field} {text!r} is not of the form KIND:ID")
        try:
            return cls(kind, ident)
        except ConfigError as exc:
            raise ConfigError(f"{where}{exc}") from None

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"


GLOBAL = Scope("global", "global")


@dataclass(frozen=True, slots=True)
class Result:
    """What a handler may return: a row count and a small JSON-serialisable payload."""

    rows_affected: int = 0
    data: Any = field(default_factory=dict)


# Bytes of UTF-8: with two 1 KiB scope parts the unique key stays under PostgreSQL's btree
# entry limit (about 2.7 kB).
_NAME_MAX = 200


def check_job_name(job: object) -> str:
    """``job`` if it is a usable job name, else :class:`ConfigError`."""
    if not isinstance(job, str) or not job:
        raise ConfigError(f"job name={job!r} must be a non-empty string")
    shown = repr(job) if len(job) <= 80 else f"{job[:80]!r}... ({len(job)} characters)"
    control = control_character(job)
    if control is not None:
        raise ConfigError(f"job name={shown} contains a control character ({control})")
    try:
        size = len(job.encode())
    except UnicodeEncodeError:
        raise ConfigError(f"job name={shown} is not valid Unicode") from None
    if size > _NAME_MAX:
        raise ConfigError(f"job name={shown} is {size} bytes; the limit is {_NAME_MAX} bytes")
    return job
