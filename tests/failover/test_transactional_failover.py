"""A transactional run in flight when its primary crashes and the standby is promoted: the
run's transaction vanishes with the old primary, the replica finds the row still RUNNING
under its lease on the new primary and runs the plan again there, without spending the
attempt (max_attempts=1): one SUCCESS row, one effect."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest

import pgsched
from tests.support.postgres import REPLICATION, PrivateServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.failover


@pytest.fixture
def pair() -> Iterator[tuple[PrivateServer, PrivateServer]]:
    with (
        PrivateServer.create(REPLICATION, system_first=True) as primary,
        primary.standby() as standby,
    ):
        yield primary, standby


def _caught_up(primary: PrivateServer, standby: PrivateServer) -> bool:
    (sent,) = primary.sql("SELECT pg_current_wal_lsn()::text")[0]
    (replayed,) = standby.sql(
        "SELECT pg_wal_lsn_diff(pg_last_wal_replay_lsn(), %s::pg_lsn) >= 0", (sent,)
    )[0]
    return bool(replayed)


def test_a_transactional_run_cut_off_by_a_crash_failover_runs_once_on_the_new_primary(
    pair: tuple[PrivateServer, PrivateServer],
) -> None:
    old, new = pair
    schema = f"tx_{uuid.uuid4().hex[:10]}"
    dsn = (
        f"host=127.0.0.1,127.0.0.1 port={old.port},{new.port} dbname=postgres user=postgres "
        "target_session_attrs=read-write"
    )
    s = pgsched.Scheduler(dsn=dsn, schema=schema, runner_id="tx", shutdown_grace="1s")
    s.migrate()
    old.sql(f'CREATE TABLE "{schema}".ledger (plan text, attempt int)')
    inside, crashed = threading.Event(), threading.Event()
    calls: list[int] = []

    def handler(run: pgsched.Run) -> int:
        assert isinstance(run.conn, psycopg.Connection)
        calls.append(run.attempt)
        run.conn.execute(f'INSERT INTO "{schema}".ledger VALUES (%s, %s)', ("p", run.attempt))
        if len(calls) == 1:
            inside.set()
            assert crashed.wait(20)
            run.conn.execute("SELECT 1")  # the old primary is gone: raises
        return 1

    s.register(handler, name="tx", every="1h", transactional=True, max_attempts=1)
    reports: list[pgsched.TickReport] = []
    thread = threading.Thread(target=lambda: reports.append(s.run_once()), daemon=True)
    thread.start()
    try:
        wait_until(inside.is_set, 10, "the first run")
        wait_until(lambda: _caught_up(old, new), 10, "the standby to have the claim")
        old.stop("immediate")
        new.promote()
    finally:
        crashed.set()
    thread.join(30)
    assert not thread.is_alive(), "the run did not end on the new primary"
    assert (reports[0].succeeded, reports[0].failed) == (1, 0)
    assert calls == [1, 1]  # run again under the same lease and attempt
    rows = new.sql(f'SELECT status, attempt FROM "{schema}".cron_executions')
    assert rows == [("SUCCESS", 1)]
    assert new.sql(f'SELECT plan, attempt FROM "{schema}".ledger') == [("p", 1)]
