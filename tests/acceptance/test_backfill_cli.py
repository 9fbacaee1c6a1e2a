"""``pgsched backfill`` of 6 years of a 10-s job (the finding's command): refused at once
with one line naming the job and the count; nothing inserted."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg

from tests.support.replica import clean_env
from tests.support.rows import count

APP = textwrap.dedent(
    """
    import pgsched
    scheduler = pgsched.Scheduler()
    @scheduler.job(every="10s")
    def tick(run):
        return 1
    """
)


def test_backfill_of_19_million_plans_is_refused_in_one_line(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    (tmp_path / "app.py").write_text(APP)
    env = clean_env({"PGSCHED_DSN": pg_dsn, "PGSCHED_SCHEMA": schema})

    def pgsched(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pgsched", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert pgsched("migrate").returncode == 0
    result = pgsched("backfill", "app.py", "tick", "--from", "2020-01-01", "--to", "2026-01-01")
    assert result.returncode == 1
    assert result.stderr == (
        "pgsched: error: job 'tick': backfill of 18,938,881 runs (18,938,881 plans x 1 scope)"
        " refused: at most 100,000 runs per backfill; split the range\n"
    )
    with psycopg.connect(pg_dsn, autocommit=True) as db:
        assert count(db, schema) == 0
