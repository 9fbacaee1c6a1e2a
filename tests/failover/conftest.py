"""Fixtures of the failover tests: a private PostgreSQL primary (``tests/support/postgres.py``)
that the tests may make read-only or cut off, and a scheduler running with its HTTP server."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import pgsched
from tests.support.postgres import REPLICATION, PrivateServer
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def primary() -> Iterator[PrivateServer]:
    """A private primary for the module; each test uses a schema of its own."""
    with PrivateServer.create(REPLICATION, system_first=True) as server:
        yield server


@contextmanager
def serving(scheduler: pgsched.Scheduler, stop_timeout: float = 30) -> Iterator[int]:
    """``scheduler.run(http_port=0)`` in a thread; yields its HTTP port; stopped after."""
    errors: list[BaseException] = []

    def target() -> None:
        try:
            scheduler.run(http_port=0)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=target, name=f"run-{scheduler.runner_id}", daemon=True)
    thread.start()
    try:
        yield wait_until(lambda: scheduler.http_port, 15, "the HTTP server")
    finally:

        def stopped() -> bool:
            scheduler.stop()
            thread.join(0.2)
            return not thread.is_alive()

        wait_until(stopped, stop_timeout, "the scheduler to stop", interval=0.05)
    assert not errors, f"run() raised {errors[0]!r}"


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    """GET ``path`` of a replica's HTTP server: status and JSON body."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
