"""The Python API on a database that cannot be reached: every call raises
``pgsched.DatabaseError`` (a ``PgschedError``) naming the host, never the password, and
promptly rather than after a pool's timeout."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

import pgsched
from tests.support.net import free_port

PASSWORD = "s3cret-Pw"


def _down() -> tuple[str, str]:
    """A DSN of a port nothing listens on, and its ``host:port``."""
    port = free_port()
    return f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/postgres", f"127.0.0.1:{port}"


def _scheduler(dsn: str) -> pgsched.Scheduler:
    scheduler = pgsched.Scheduler(dsn=dsn)

    @scheduler.job(every="1s")
    def beat(run: pgsched.Run) -> int:
        return 1

    return scheduler


def _assert_database_error(call: Callable[[], Any], where: str) -> None:
    started = time.monotonic()
    with pytest.raises(pgsched.DatabaseError) as raised:
        call()
    # a connection refused is answered at once: far under the pools' 30 s timeout
    assert time.monotonic() - started < 10
    message = str(raised.value)
    assert isinstance(raised.value, pgsched.PgschedError)
    assert f"database error on {where}" in message
    assert "\n" not in message and PASSWORD not in message


START = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "action",
    ["status", "runs", "migrate", "trigger", "pause", "backfill", "run_once", "list_schedules"],
)
def test_scheduler_methods_raise_database_error(action: str) -> None:
    dsn, where = _down()
    s = _scheduler(dsn)
    calls: dict[str, Callable[[], Any]] = {
        "status": s.status,
        "runs": s.runs,
        "migrate": s.migrate,
        "trigger": lambda: s.trigger("beat"),
        "pause": lambda: s.pause("beat"),
        "backfill": lambda: s.backfill("beat", START, START.replace(minute=1)),
        "run_once": s.run_once,
        "list_schedules": lambda: s.list_schedules("beat"),
    }
    _assert_database_error(calls[action], where)


def test_admin_raises_database_error() -> None:
    dsn, where = _down()
    _assert_database_error(lambda: pgsched.Admin(dsn=dsn).status(), where)


def test_async_admin_raises_database_error_at_once() -> None:
    dsn, where = _down()

    async def status() -> None:
        admin = pgsched.AsyncAdmin(dsn=dsn)
        try:
            await admin.status()
        finally:
            await admin.aclose()

    _assert_database_error(lambda: asyncio.run(status()), where)
