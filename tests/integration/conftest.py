"""Fixtures of the integration tests (real PostgreSQL; see tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import pgsched

SchedulerFactory = Callable[..., pgsched.Scheduler]


@pytest.fixture
def make_scheduler(pg_dsn: str, schema: str) -> SchedulerFactory:
    """Build Schedulers on the test's schema: ``make_scheduler("r2", max_concurrency=5)``."""

    def make(runner_id: str = "r1", **options: Any) -> pgsched.Scheduler:
        options.setdefault("tick_interval", "1s")
        return pgsched.Scheduler(dsn=pg_dsn, schema=schema, runner_id=runner_id, **options)

    return make


@pytest.fixture
def migrated(pg_dsn: str, schema: str) -> str:
    """The test's schema, migrated."""
    pgsched.Scheduler(dsn=pg_dsn, schema=schema, runner_id="migrator").migrate()
    return schema
