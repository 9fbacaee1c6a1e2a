"""Fixtures of the failover tests: a private PostgreSQL primary (``tests/support/postgres.py``)
that the tests may make read-only or cut off."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.postgres import REPLICATION, PrivateServer


@pytest.fixture(scope="module")
def primary() -> Iterator[PrivateServer]:
    """A private primary for the module; each test uses a schema of its own."""
    with PrivateServer.create(REPLICATION, system_first=True) as server:
        yield server
