"""A switchover under a running `pgsched run` replica: a primary and a hot standby streaming
from it (``pg_basebackup -R``); the old primary is made read-only, the standby catches up and
is promoted. The replica's DSN names both servers with ``target_session_attrs=read-write``,
so it must leave the read-only server and carry on on the new primary: work resumes within
10 s and no row is left RUNNING."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import pgsched
from tests.failover.cluster import Cluster, Node
from tests.helpers import wait_for

pytestmark = pytest.mark.failover

SCHEMA = "switchover"
APP = textwrap.dedent(
    """
    import time
    import pgsched

    scheduler = pgsched.Scheduler(tick_interval="0.2s", max_concurrency=4)

    @scheduler.job(
        every="1s", scopes=[pgsched.Scope("shard", str(i)) for i in range(2)],
        run_timeout="5s", stale_timeout="6s", heartbeat_interval="1s", max_attempts=3,
        retry_backoff=["1s"],
    )
    def work(run):
        time.sleep(0.6)  # long enough for some runs to be in flight at the switchover
        return 1
    """
)


@pytest.fixture
def pair() -> Iterator[tuple[Node, Node]]:
    cluster = Cluster()
    try:
        primary = cluster.primary()
        yield primary, cluster.standby(primary)
    finally:
        cluster.close()


def _count(node: Node, where: str, params: Any = None) -> int:
    rows = node.sql(f"SELECT count(*) FROM {SCHEMA}.cron_executions WHERE {where}", params)
    return int(rows[0][0])


def _caught_up(primary: Node, standby: Node) -> bool:
    (sent,) = primary.sql("SELECT pg_current_wal_lsn()::text")[0]
    (replayed,) = standby.sql(
        "SELECT pg_wal_lsn_diff(pg_last_wal_replay_lsn(), %s::pg_lsn) >= 0", (sent,)
    )[0]
    return bool(replayed)


def test_read_only_switchover_resumes_on_the_new_primary(
    pair: tuple[Node, Node], tmp_path: Path
) -> None:
    old, new = pair
    with pgsched.Admin(old.dsn(), schema=SCHEMA) as admin:
        admin.migrate()
    (tmp_path / "app.py").write_text(APP)
    dsn = (
        f"host=127.0.0.1,127.0.0.1 port={old.port},{new.port} dbname=postgres user=postgres "
        "target_session_attrs=read-write"
    )
    log = tmp_path / "replica.log"
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pgsched", "--schema", SCHEMA, "run", "app.py", "--no-http"],
            cwd=tmp_path,
            env={"PATH": "/usr/bin:/bin", "PGSCHED_DSN": dsn, "PGSCHED_LOG_FORMAT": "json"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_for(lambda: _count(old, "status = 'SUCCESS'") >= 4, 20, what="work on the primary")

        old.set_read_only(True)  # the switchover: writes end here
        wait_for(lambda: _caught_up(old, new), 10, what="the standby to replay everything")
        # Promote only once the replica has found no writable server for a while (its pool
        # gives up on a connection after 5 s): runs in flight meanwhile must wait it out.
        wait_for(lambda: "tick_error" in log.read_text(), 15, what="a tick to fail")
        new.promote()
        (promoted_at,) = new.sql("SELECT clock_timestamp()")[0]
        started = time.monotonic()
        wait_for(
            lambda: _count(new, "status = 'SUCCESS' AND started_at > %s", (promoted_at,)) >= 1,
            10,
            what="a run claimed and finished on the new primary within 10 s",
        )
        resumed_s = time.monotonic() - started
        # Runs in flight at the switchover finish through the new primary too.
        wait_for(
            lambda: _count(new, "status = 'RUNNING' AND started_at < %s", (promoted_at,)) == 0,
            15,
            what="no run of before the switchover left RUNNING",
        )
        assert proc.poll() is None, "the replica died in the switchover"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    text = log.read_text(encoding="utf-8")
    assert _count(new, "status = 'RUNNING'") == 0, "rows left RUNNING after a clean stop"
    assert "Traceback" not in text
    succeeded, failed = _count(new, "status = 'SUCCESS'"), _count(new, "status = 'FAILED'")
    print(
        f"work resumed {resumed_s:.2f} s after promotion; {succeeded} SUCCESS rows, "
        f"{failed} FAILED; writer_retry logged {text.count('writer_retry')}x, "
        f"tick_error {text.count('tick_error')}x"
    )
