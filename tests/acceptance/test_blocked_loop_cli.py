"""``pgsched run`` with an ``async`` handler that blocks the loop (the finding's
``time.sleep(12)`` with ``run_timeout=3s``, shortened): the block is logged naming the job
and execution, the run is FAILED ``run_timeout``, and the metric counts it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

from tests.support.replica import Replica, clean_env
from tests.support.waiting import wait_until

APP = textwrap.dedent(
    """
    import time
    import pgsched

    scheduler = pgsched.Scheduler(tick_interval="0.5s")

    @scheduler.job(every="1h", run_timeout="1s", stale_timeout="30s", max_attempts=1)
    async def blocker(run):
        time.sleep(2.5)  # blocks the event loop: the bug under test
        return 1
    """
)


def test_a_blocking_async_handler_is_named_and_failed_run_timeout(
    pg_dsn: str, schema: str, tmp_path: Path
) -> None:
    (tmp_path / "app.py").write_text(APP)
    env = clean_env({"PGSCHED_DSN": pg_dsn, "PGSCHED_SCHEMA": schema})
    migrate = [sys.executable, "-m", "pgsched", "migrate"]
    subprocess.run(migrate, cwd=tmp_path, env=env, check=True, capture_output=True)
    replica = Replica.run("app.py", "blocked", cwd=tmp_path, env=env)
    try:
        replica.http_port()
        failed = replica.wait_event("run_failed", 60)
        blocked = replica.wait_event("event_loop_blocked", 10)
        assert blocked["job"] == "blocker" and blocked["blocked_s"] >= 2.5
        assert blocked["execution_id"] == failed["execution_id"]
        assert failed["error_code"] == "run_timeout", failed
        assert "blocked the event loop" in failed["error"], failed
        metric = 'pgsched_event_loop_blocked_total{job="blocker"} 1.0'
        wait_until(lambda: metric in replica.get("/metrics").text, 10, "the metric counted")
        assert replica.stop() == 0
    finally:
        replica.kill()
