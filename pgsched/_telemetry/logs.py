"""structlog set-up: readable lines on a terminal, JSON lines otherwise."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from structlog.typing import FilteringBoundLogger

from .._errors import ConfigError
from .._secrets import redact


def _redact_passwords(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    for key, value in event.items():
        if isinstance(value, str):
            event[key] = redact(value)
    return event


def _one_line(
    _logger: Any, _method: str, event: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """The message and error of an event on one line: libpq lists every host it tried on a
    line of its own (a multi-host DSN), and psycopg_pool quotes that in its warnings."""
    for key in ("event", "error"):
        value = event.get(key)
        if isinstance(value, str) and "\n" in value:
            event[key] = " | ".join(part.strip() for part in value.splitlines() if part.strip())
    return event


def configure_logging(fmt: str | None = None, level: int | str | None = None) -> None:
    """Configure structlog globally for pgsched's command line (or for an application).

    ``fmt`` is ``"json"`` or ``"console"``; it defaults to ``PGSCHED_LOG_FORMAT``, then to
    console lines when stderr is a terminal (coloured) and JSON lines when it is not.
    ``level`` defaults to ``PGSCHED_LOG_LEVEL``, then ``info`` (``warning`` drops the
    per-run events). Events go to stderr, one per line, with DSN passwords redacted.
    """
    tty = sys.stderr.isatty()
    fmt = (fmt or os.environ.get("PGSCHED_LOG_FORMAT") or ("console" if tty else "json")).lower()
    if fmt not in ("json", "console"):
        raise ConfigError(f"PGSCHED_LOG_FORMAT={fmt!r} must be 'json' or 'console'")
    level = level or os.environ.get("PGSCHED_LOG_LEVEL") or "info"
    if isinstance(level, str):
        name = level.upper()
        number = logging.getLevelNamesMapping().get(name)
        if number is None:
            raise ConfigError(f"PGSCHED_LOG_LEVEL={level!r} is not a log level (debug, info, ...)")
        level = number
    renderer: Any = (
        structlog.dev.ConsoleRenderer(colors=tty)
        if fmt == "console"
        else structlog.processors.JSONRenderer()
    )
    shared: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        _redact_passwords,
        _one_line,
    ]
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, *shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=False,
    )
    # Libraries log through the standard library (psycopg_pool's connection warnings quote
    # the DSN); render those the same way, passwords redacted.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    # psycopg_pool logs a warning for every connection attempt it retries; pgsched logs
    # one line of its own per failed attempt or tick (database_unavailable, tick_error).
    logging.getLogger("psycopg.pool").setLevel(max(level, logging.ERROR))
    root.setLevel(max(level, logging.WARNING))


def bound_logger(**fields: Any) -> FilteringBoundLogger:
    """The pgsched structlog logger, bound to ``fields``."""
    logger: FilteringBoundLogger = structlog.get_logger("pgsched").bind(**fields)
    return logger
