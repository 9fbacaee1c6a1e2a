"""Time as callers give it: durations (``timedelta``, seconds, or strings such as ``"1h30m"``)
and instants (aware datetimes, or ISO 8601 text on the command line and in the HTTP API)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from pytimeparse.timeparse import timeparse as _parse_text

from ._errors import ConfigError

# One microsecond, PostgreSQL's timestamp resolution: the instant just before ``t`` is
# ``t - US``, so an inclusive bound is an exclusive one a microsecond off.
US = timedelta(microseconds=1)

Duration = timedelta | int | float | str

# Anything beyond a century is a typo, and it would overflow timestamp arithmetic in PostgreSQL.
_MAX = timedelta(days=36500)


def parse_duration(
    value: object, *, field: str, job: str | None = None, allow_zero: bool = True
) -> timedelta:
    """Return ``value`` as a ``timedelta`` or raise :class:`ConfigError` naming job and field.

    Negative, NaN, infinite and over-a-century values are refused; zero only when ``allow_zero``.
    """
    where = f"job {job!r}: " if job is not None else ""
    if isinstance(value, bool):
        raise ConfigError(f"{where}{field}={value!r} is not a duration")
    if isinstance(value, timedelta):
        result = value
    elif isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{where}{field}={value!r} is not a finite duration")
        if abs(value) > _MAX.total_seconds():  # also keeps huge ints from overflowing floats
            shown = (
                value if abs(value) < 10**60 else f"{str(value)[:12]}... ({len(str(value))} digits)"
            )
            raise ConfigError(f"{where}{field}={shown} is longer than 100 years")
        result = timedelta(seconds=value)
    elif isinstance(value, str):
        seconds = _parse_text(value.strip()) if value.strip() else None
        if seconds is None:
            raise ConfigError(
                f"{where}{field}={value!r} is not a duration (use e.g. '90s', '5m', '1h30m', '1d')"
            )
        if abs(seconds) > _MAX.total_seconds():
            raise ConfigError(f"{where}{field}={value!r} is longer than 100 years")
        result = timedelta(seconds=seconds)
    else:
        raise ConfigError(f"{where}{field}={value!r} is not a duration")
    if result < timedelta(0):
        raise ConfigError(f"{where}{field}={value!r} must not be negative")
    if result > _MAX:
        raise ConfigError(f"{where}{field}={value!r} is longer than 100 years")
    if not allow_zero and result == timedelta(0):
        raise ConfigError(f"{where}{field}={value!r} must be greater than zero")
    return result


_UNITS = (("d", 86400_000_000), ("h", 3600_000_000), ("m", 60_000_000))


def format_duration(value: timedelta) -> str:
    """A duration as durations are written in input (``parse_duration`` reads it back):
    ``20s``, ``15m``, ``1h30m``, ``2d``, ``1.5s``; the one form every human output uses."""
    rest = value // timedelta(microseconds=1)
    if rest <= 0:
        return "0s"
    parts = []
    for unit, size in _UNITS:
        count, rest = divmod(rest, size)
        if count:
            parts.append(f"{count}{unit}")
    if rest:
        parts.append(f"{rest / 1_000_000:.6f}".rstrip("0").rstrip(".") + "s")
    return "".join(parts)


def aware(value: datetime, name: str) -> datetime:
    """``value`` in UTC; a naive datetime is refused."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise ConfigError(f"{name}={value!r} must be a timezone-aware datetime")
    return value.astimezone(UTC)


def parse_time(text: str, name: str) -> datetime:
    """An ISO 8601 instant such as ``2027-03-28T09:00:00+02:00``; without an offset, UTC."""
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(
            f"{name}={text!r} is not an ISO 8601 time (e.g. 2027-03-28T09:00:00Z)"
        ) from None
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
