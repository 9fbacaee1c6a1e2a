"""synchronous_claims on the shared server (which has no synchronous standby): which statements
a tick runs with and without it, and the one warning a replica logs at start."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest
from structlog.testing import capture_logs

import pgsched
from pgsched._storage.statements import Statements
from tests.integration.conftest import SchedulerFactory
from tests.support.rows import count, rows
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("migrated")
SYNC_ONLY = {"claim_begin_synchronous", "synchronous_commit", "synchronous_standbys"}
# The pool's checks of the connections it opens and lends: as many as it happens to open.
POOL = {"server_state", "configure_session"}
# The ledger figures' check after a claim: it runs beside the handler and its terminal write
# (their order is the event loop's), and analyzes only a partition the planner has no
# figures for (which autovacuum may have given it at any moment).
FIGURES = {"partition_figures", "analyze_partition"}


@pytest.fixture
def statements(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the statements pgsched runs through its store (but the pool's checks, the
    ledger figures' and the sync handlers' transactional writes), in order."""
    names: list[str] = []
    original = Statements._execute

    async def recording(self: Statements, cur: Any, name: str, *args: Any, **kw: Any) -> None:
        if name not in POOL | FIGURES:
            names.append(name)
        await original(self, cur, name, *args, **kw)

    monkeypatch.setattr(Statements, "_execute", recording)
    return names


def _ticks(
    make_scheduler: SchedulerFactory, statements: list[str], runner: str, **options: Any
) -> list[str]:
    """On one replica: a claiming tick (one plan due, its handler run and written), then an
    idle tick (nothing due, nothing held)."""
    s = make_scheduler(runner, **options)
    s.register(lambda run: 1, name=f"job_{runner}", every="1h")

    async def ticks() -> list[str]:
        async with s._pool() as pool:
            runtime = s._new_replica(pool).runtime
            runtime.start_background(listen=False)
            statements.clear()
            assert await runtime.tick()
            await runtime.wait_idle()
            claiming = list(statements)
            statements.clear()
            assert await runtime.tick()
            idle = list(statements)
            await runtime.shutdown(timedelta(0))
        assert runtime.report.succeeded == 1
        return [*claiming, "--idle--", *idle]

    return asyncio.run(ticks())


def _beside_probes(names: list[str]) -> list[str]:
    return [n for n in names if n not in ("generic_plans", "tick_probe")]


def test_without_the_option_no_statement_is_added(
    make_scheduler: SchedulerFactory, statements: list[str]
) -> None:
    off = _ticks(make_scheduler, statements, "off")
    on = _ticks(make_scheduler, statements, "on", synchronous_claims=True)
    assert not SYNC_ONLY & set(off)
    assert "claim_begin" in off and "finish" in off
    # With it: the claim's first statement also sets synchronous_commit (no extra round
    # trip), the terminal write gets one, and each replica start checks the standbys once.
    assert on.count("synchronous_standbys") == 1  # once per replica
    assert on.count("synchronous_commit") == 1
    # The tick's probe after its claim runs beside the writer's statements, in either order.
    assert _beside_probes(on).index("synchronous_commit") == _beside_probes(on).index("finish") - 1
    same = [{"claim_begin_synchronous": "claim_begin"}.get(n, n) for n in on]
    assert _beside_probes([n for n in same if n not in SYNC_ONLY]) == _beside_probes(off)
    assert on.count("tick_probe") == off.count("tick_probe")
    assert (
        off[off.index("--idle--") :]
        == on[on.index("--idle--") :]
        == ["--idle--", "generic_plans", "tick_probe"]
    )


def test_one_warning_when_the_server_has_no_synchronous_standby(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler(synchronous_claims=True, tick_interval="0.1s")
    s.register(lambda run: 1, name="often", every="1s")
    with capture_logs() as logs:
        thread = threading.Thread(target=s.run, daemon=True)
        thread.start()
        try:
            wait_until(lambda: count(db, migrated, "status = 'SUCCESS'") >= 2, 15, "2 runs")
        finally:
            s.stop()
            thread.join(15)
    assert not thread.is_alive()
    warned = [e for e in logs if e["event"] == "synchronous_claims_unprotected"]
    assert len(warned) == 1, warned
    assert warned[0]["log_level"] == "warning"
    assert "not protected against failover" in warned[0]["reason"]
    assert {r["status"] for r in rows(db, migrated)} <= {"SUCCESS", "RUNNING"}


def test_without_the_option_no_warning(make_scheduler: SchedulerFactory) -> None:
    s = make_scheduler()
    s.register(lambda run: 1, name="once", every="1h")
    with capture_logs() as logs:
        assert s.run_once().succeeded == 1
    assert not [e for e in logs if str(e["event"]).startswith("synchronous_")]


def test_a_dynamic_jobs_claims_are_synchronous_too(
    make_scheduler: SchedulerFactory, statements: list[str]
) -> None:
    """A dynamic job's claim transaction is opened by the same synchronous claim_begin, so no
    claim statement runs in a transaction that commits without the standby."""
    s = make_scheduler("dyn", synchronous_claims=True)
    s.register(lambda run: 1, name="dyn", dynamic=True)
    s.put_schedule("dyn", pgsched.Scope("user", "1"), every="1s")
    statements.clear()
    wait_until(lambda: s.run_once().succeeded, 10, "the schedule's run")
    assert "claim_schedules" in statements
    assert "claim_begin" not in statements
    claim = statements.index("claim_schedules")
    assert "claim_begin_synchronous" in statements[:claim]
