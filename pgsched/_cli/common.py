"""What the command line's modules share: the ``Admin`` of the command's options and the
human output (UTC times, aligned tables)."""

from __future__ import annotations

import argparse
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from .._dsn import resolve_dsn
from .._errors import ConfigError
from .._facades.admin import Admin
from .._operations.audit import local_user
from .._operations.core import Operations, no_jobs
from .._operations.requests import Label
from .._portal import PORTAL
from .embedded import default_data_dir, running_embedded

_R = TypeVar("_R", covariant=True)


class Request(Protocol[_R]):
    """A request of the operations core (``pgsched._operations.requests``)."""

    def send(self, ops: Operations) -> Coroutine[Any, Any, _R]: ...


def configured_dsn(explicit: str | None) -> str:
    """``explicit`` (``--dsn``), else ``PGSCHED_DSN`` or ``DATABASE_URL``, else the embedded
    PostgreSQL that ``pgsched run`` started (and still runs) in the default data directory."""
    dsn = resolve_dsn(explicit) or running_embedded()
    if dsn is None:
        raise ConfigError(
            "no database configured: pass --dsn, or set PGSCHED_DSN or DATABASE_URL (no"
            f" embedded PostgreSQL started by 'pgsched run' is running in {default_data_dir()})"
        )
    return dsn


def admin_from(args: argparse.Namespace) -> Admin:
    """The ``Admin`` of ``--dsn`` (see :func:`configured_dsn`), ``--schema`` and
    ``--transaction-pooling``; given a scheduler (``manage.py pgsched``), it knows that
    scheduler's jobs, as a replica running them would have recorded them."""
    scheduler = getattr(args, "scheduler", None)
    return Admin(
        dsn=configured_dsn(args.dsn),
        schema=args.schema or "pgsched",
        jobs=no_jobs if scheduler is None else lambda: scheduler.jobs,
        transaction_pooling=args.transaction_pooling or None,
        actor=local_user(),  # the OS user of the command, on the surface "cli"
        surface="cli",
    )


def send(args: argparse.Namespace, request: Request[_R]) -> _R:
    """``request`` sent to the operations core of :func:`admin_from`, as its methods do."""
    return PORTAL.call(request.send(admin_from(args).operations))


def given(args: argparse.Namespace, names: tuple[str, ...]) -> dict[str, object]:
    """The options and arguments ``names`` of the command: the fields of a request."""
    return {name: getattr(args, name, None) for name in names}


def option(name: str) -> str:
    """A field of an operation as this command line's option: ``--all-scopes``."""
    return "--" + name.replace("_", "-")


def labels(*positional: str) -> Label:
    """A command's fields as its caller writes them: ``positional`` by their name (``job``),
    the others as options (``--at``)."""
    return lambda name: name if name in positional else option(name)


def cli_field(name: str, value: object) -> str:
    """A field of an operation as this command line's option: ``--all-scopes``,
    ``--scope KIND:ID``."""
    return option(name) if value is True else f"{option(name)} {value}"


def utc_text(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def print_table(headers: list[str], rows: list[list[Any]]) -> None:
    """Print ``rows`` as aligned columns (the last column is not padded)."""
    cells = [headers, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers) - 1)]
    for row in cells:
        padded = [c.ljust(w) for c, w in zip(row, widths, strict=False)]
        print("  ".join([*padded, row[-1]]).rstrip())
