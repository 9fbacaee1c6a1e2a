"""What the command line's modules share: the ``Admin`` of the command's options and the
human output (UTC times, aligned tables)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from .._admin import Admin


def admin_from(args: argparse.Namespace) -> Admin:
    """The ``Admin`` of ``--dsn``, ``--schema`` and ``--transaction-pooling``."""
    return Admin(
        dsn=args.dsn,
        schema=args.schema or "pgsched",
        transaction_pooling=args.transaction_pooling or None,
    )


def utc_text(value: datetime | None) -> str:
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def print_table(headers: list[str], rows: list[list[Any]]) -> None:
    """Print ``rows`` as aligned columns (the last column is not padded)."""
    cells = [headers, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers) - 1)]
    for row in cells:
        padded = [c.ljust(w) for c, w in zip(row, widths, strict=False)]
        print("  ".join([*padded, row[-1]]).rstrip())
