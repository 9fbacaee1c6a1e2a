"""Fixtures of the operator-command tests: a migrated schema, with or without the jobs of
``ops.APP`` registered."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import pgsched
from tests.acceptance.operator_cli.ops import APP, Ops, register_jobs


@pytest.fixture
def bare_ops(pg_dsn: str, schema: str, tmp_path: Path, db: Any) -> Ops:
    """A migrated, empty schema (for tests whose replica registers its own jobs)."""
    pgsched.Scheduler(dsn=pg_dsn, schema=schema, runner_id="migrator").migrate()
    return Ops(pg_dsn, schema, tmp_path, db)


@pytest.fixture
def ops(bare_ops: Ops) -> Ops:
    """hourly and per_tenant registered in job_state (their current plans have run)."""
    (bare_ops.workdir / "app.py").write_text(APP)
    register_jobs(bare_ops.dsn, bare_ops.schema)
    return bare_ops
