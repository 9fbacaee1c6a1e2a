"""synchronous_claims on a private primary with a synchronous standby (``synchronous_standby_names
= '*'``, the server's default ``synchronous_commit = local`` so that applications opt in per
transaction). With the standby stopped no commit can be confirmed by it: a replica with the
option cannot commit its claim (the row stays invisible, its handler does not start) until the
standby is back, while a replica without it claims and runs as before."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from structlog.testing import capture_logs

import pgsched
from tests.support.postgres import REPLICATION, PrivateServer
from tests.support.waiting import wait_until

pytestmark = pytest.mark.failover


@pytest.fixture
def synchronous_pair() -> Iterator[tuple[PrivateServer, PrivateServer]]:
    with (
        PrivateServer.create(REPLICATION, system_first=True) as primary,
        primary.standby() as standby,
    ):
        primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        primary.sql("ALTER SYSTEM SET synchronous_commit = 'local'")
        primary.sql("SELECT pg_reload_conf()")
        wait_until(lambda: _sync_standbys(primary) == 1, 15, "a synchronous standby")
        yield primary, standby


def _sync_standbys(primary: PrivateServer) -> int:
    query = "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'"
    return int(primary.sql(query)[0][0])


def _scheduler(
    primary: PrivateServer,
    runner: str,
    handler: Any = lambda run: 1,
    *,
    transactional: bool = False,
    **options: Any,
) -> pgsched.Scheduler:
    schema = f"s_{uuid.uuid4().hex[:10]}"
    s = pgsched.Scheduler(
        dsn=primary.dsn(), schema=schema, runner_id=runner, shutdown_grace="1s", **options
    )
    s.migrate()
    s.register(handler, name="job", every="1h", transactional=transactional)
    return s


def _waiting_for_standby(primary: PrivateServer, runner: str) -> bool:
    """A session of ``runner`` waits in a COMMIT for the synchronous standby."""
    query = (
        "SELECT count(*) FROM pg_stat_activity"
        " WHERE wait_event = 'SyncRep' AND application_name = %s"
    )
    return bool(primary.sql(query, (f"pgsched {runner}",))[0][0])


def _rows(primary: PrivateServer, schema: str) -> list[tuple[Any, ...]]:
    return primary.sql(f'SELECT status, attempt FROM "{schema}".cron_executions')


def test_a_synchronous_claim_waits_for_the_standby_and_an_ordinary_one_does_not(
    synchronous_pair: tuple[PrivateServer, PrivateServer],
) -> None:
    primary, standby = synchronous_pair
    on = _scheduler(primary, "sync-on", synchronous_claims=True)
    off = _scheduler(primary, "sync-off")
    standby.stop()
    wait_until(lambda: _sync_standbys(primary) == 0, 10, "the standby to disconnect")

    assert off.run_once().succeeded == 1  # commits locally, as the server's default says
    assert _rows(primary, off.schema) == [("SUCCESS", 1)]

    reports: list[pgsched.TickReport] = []
    with capture_logs() as logs:
        thread = threading.Thread(target=lambda: reports.append(on.run_once()), daemon=True)
        thread.start()
        wait_until(
            lambda: _waiting_for_standby(primary, "sync-on"), 10, "the claim's COMMIT to wait"
        )
        assert _rows(primary, on.schema) == []  # the claimed row is not visible to others
        thread.join(1.0)
        assert thread.is_alive()  # the tick is blocked in the claim's COMMIT
        standby.start()  # once the standby has the claim, it commits and the plan runs
        thread.join(20)
    assert not thread.is_alive(), "run_once did not finish once the standby was back"
    assert reports[0].succeeded == 1
    assert _rows(primary, on.schema) == [("SUCCESS", 1)]
    events = [e["event"] for e in logs]
    assert events.count("synchronous_standby_missing") == 1
    assert "synchronous_claims_unprotected" not in events


@pytest.mark.parametrize("transactional", [False, True])
def test_a_synchronous_terminal_write_waits_for_the_standby(
    synchronous_pair: tuple[PrivateServer, PrivateServer], transactional: bool
) -> None:
    """The claim commits (the standby is up); the standby stops while the handler runs: its
    SUCCESS row (the writer's, or the transactional run's own) stays invisible until the
    standby is back."""
    primary, standby = synchronous_pair
    release = threading.Event()

    def handler(run: pgsched.Run) -> int:
        assert release.wait(15)
        return 1

    runner = f"fin-{transactional}"
    s = _scheduler(primary, runner, handler, transactional=transactional, synchronous_claims=True)
    reports: list[pgsched.TickReport] = []
    thread = threading.Thread(target=lambda: reports.append(s.run_once()), daemon=True)
    thread.start()
    try:
        wait_until(lambda: _rows(primary, s.schema) == [("RUNNING", 1)], 10, "the claim")
        standby.stop()
        wait_until(lambda: _sync_standbys(primary) == 0, 10, "the standby to disconnect")
    finally:
        release.set()
    wait_until(lambda: _waiting_for_standby(primary, runner), 10, "the SUCCESS to wait")
    assert _rows(primary, s.schema) == [("RUNNING", 1)]
    standby.start()
    thread.join(20)
    assert not thread.is_alive(), "run_once did not finish once the standby was back"
    assert reports[0].succeeded == 1
    assert _rows(primary, s.schema) == [("SUCCESS", 1)]
