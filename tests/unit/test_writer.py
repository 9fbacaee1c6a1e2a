"""The lease writer (``pgsched._engine.writer``) on a fake store: terminal writes batched and
guarded by lease tokens, retried while the database is unavailable, refused rows written one by one
(and as ``invalid_result`` when their value cannot be stored), heartbeats under the same lock,
and the writes put back after a failover."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest
from structlog.testing import capture_logs

import pgsched
from pgsched._engine import writer as _writer
from pgsched._engine.leases import LeaseTable
from pgsched._engine.recorder import Recorder
from pgsched._engine.values import Lease, Outcome
from pgsched._engine.writer import LeaseWriter
from pgsched._records import Finish, Server
from pgsched._storage.connection import Backoff
from tests.unit.engine_fakes import FakePool, FakeStore, idle, job, lease, ok, recorder, table


@pytest.fixture(autouse=True)
def quick_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retries a thousand times sooner than in production: what is tested is that they
    happen, not how long they wait."""

    class Quick(Backoff):
        def __init__(self) -> None:
            super().__init__(first=0.0005, cap=0.005)

    monkeypatch.setattr(_writer, "Backoff", Quick)


@dataclasses.dataclass
class Rig:
    store: FakeStore
    leases: LeaseTable
    rec: Recorder
    writer: LeaseWriter

    def held(self, count: int, **job_options: Any) -> list[Lease]:
        """``count`` leases held here, each with its row in the store."""
        spec = job(overlap="allow", **job_options)
        made = [lease(spec, scope=pgsched.Scope("s", str(i))) for i in range(count)]
        for one in made:
            self.leases.hold([one])
        self.store.hold(*made)
        return made


def rig(*, synchronous: bool = False) -> Rig:
    rec = recorder()
    leases, _ = table(rec=rec)
    store = FakeStore()
    writer = LeaseWriter(
        store=store,  # type: ignore[arg-type]
        pool=FakePool(),  # type: ignore[arg-type]
        leases=leases,
        recorder=rec,
        synchronous=synchronous,
    )
    return Rig(store, leases, rec, writer)


def run(r: Rig, scenario: Callable[[], Awaitable[None]]) -> None:
    """``scenario`` with the writer's loops running, stopped after it (with a deadline)."""

    async def main() -> None:
        loops = [
            asyncio.ensure_future(r.writer.write_loop()),
            asyncio.ensure_future(r.writer.heartbeat_loop(0.005)),
        ]
        try:
            await asyncio.wait_for(scenario(), 10)
        finally:
            for loop in loops:
                loop.cancel()
            await asyncio.gather(*loops, return_exceptions=True)

    asyncio.run(main())


def test_outcomes_queued_together_are_one_statement() -> None:
    r = rig()
    leases = r.held(3)

    async def scenario() -> None:
        for one in leases:
            r.writer.submit([(one, ok())])
        await idle(r.leases)

    run(r, scenario)
    assert [len(batch) for batch in r.store.batches] == [3]
    assert set(r.store.finished) == {one.execution_id for one in leases}
    assert r.rec.report.succeeded == 3
    assert all(one.submitted and one.done for one in leases)


def test_the_writer_waits_for_more_outcomes_while_other_leases_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A linger long enough that nothing but the batch holding every lease ends it.
    monkeypatch.setattr(_writer, "_FINISH_LINGER_S", 5.0)
    r = rig()
    leases = r.held(3)

    async def scenario() -> None:
        r.writer.submit([(leases[0], ok())])
        while r.writer._outbox:  # the writer took the first outcome
            await asyncio.sleep(0)
        r.writer.submit([(leases[1], ok())])
        r.writer.submit([(leases[2], ok())])
        await idle(r.leases)

    run(r, scenario)
    assert [len(batch) for batch in r.store.batches] == [3]


def test_a_write_that_matches_no_row_loses_its_lease_and_frees_its_slot() -> None:
    r = rig()
    kept, stolen = r.held(2)
    r.store.held[stolen.execution_id] = stolen.run.lease_token.__class__(int=1)  # another lease

    async def scenario() -> None:
        r.writer.submit([(kept, ok())])
        r.writer.submit([(stolen, ok())])
        await idle(r.leases)

    run(r, scenario)
    assert set(r.store.finished) == {kept.execution_id}
    assert (r.rec.report.succeeded, r.rec.report.leases_lost) == (1, 1)
    assert stolen.liveness.known_lost


def test_an_unavailable_database_is_retried_and_the_slot_held_until_the_write_lands() -> None:
    r = rig()
    (one,) = r.held(1)
    seen: list[tuple[int, float | None]] = []

    def down_twice(statement: object) -> None:
        seen.append((len(r.leases), r.writer.failing_since))
        if len(seen) <= 2:
            raise psycopg.OperationalError("server closed the connection unexpectedly")

    r.store.fail = down_twice

    async def scenario() -> None:
        r.writer.submit([(one, ok())])
        await idle(r.leases)

    with capture_logs() as logs:
        run(r, scenario)
    assert len(seen) == 3 and [held for held, _ in seen] == [1, 1, 1]
    assert seen[0][1] is None and seen[1][1] is not None, "failing since the first attempt"
    assert r.writer.failing_since is None, "the database answered again"
    assert one.execution_id in r.store.finished
    retries = [e for e in logs if e["event"] == "writer_retry"]
    assert [e["attempt"] for e in retries] == [1, 2]
    assert retries[0]["error_class"] == "OperationalError"
    assert retries[0]["host"] == "db.example:5432"


def _refuse_poison(statement: object) -> None:
    """The database's refusal of a batch holding a value it cannot store."""
    if isinstance(statement, list) and any(row.result_json == "poison" for row in statement):
        raise psycopg.errors.UntranslatableCharacter("unsupported Unicode escape sequence")


def test_a_refused_batch_is_written_row_by_row_and_an_unstorable_value_as_invalid_result() -> None:
    r = rig()
    fine, poisoned = r.held(2, max_attempts=3)
    r.store.fail = _refuse_poison

    async def scenario() -> None:
        r.writer.submit([(fine, ok())])
        r.writer.submit([(poisoned, Outcome("SUCCESS", 5, rows_affected=1, result_json="poison"))])
        await idle(r.leases)

    run(r, scenario)
    assert [len(batch) for batch in r.store.batches] == [2, 1, 1, 1]
    assert r.store.finished[fine.execution_id].status == "SUCCESS"
    stored = r.store.finished[poisoned.execution_id]
    assert (stored.status, stored.error_code) == ("FAILED", "invalid_result")
    assert stored.result_json is None and stored.rows_affected is None
    assert stored.error_msg is not None and "while storing the outcome" in stored.error_msg
    assert stored.retry_delay_s is None, "a terminal write rewritten, not a retry asked for"
    assert len(r.leases) == 0 and r.rec.report.leases_lost == 0
    # The report (and so the logs and metrics) says what the ledger holds.
    assert (r.rec.report.succeeded, r.rec.report.failed) == (1, 1)


def test_a_row_refused_twice_is_given_up_and_its_slot_freed() -> None:
    r = rig()
    (one,) = r.held(1)

    def refuse_everything(statement: object) -> None:
        if isinstance(statement, list):
            raise psycopg.errors.CheckViolation("new row violates check constraint")

    r.store.fail = refuse_everything

    async def scenario() -> None:
        r.writer.submit([(one, ok())])
        await idle(r.leases)

    run(r, scenario)
    # The batch (of one), the row alone, the row as invalid_result: then it is given up.
    assert [[row.status for row in batch] for batch in r.store.batches] == [
        ["SUCCESS"],
        ["SUCCESS"],
        ["FAILED"],
    ]
    assert r.store.finished == {}
    assert r.rec.report.leases_lost == 1 and len(r.leases) == 0


def test_synchronous_terminal_writes_set_synchronous_commit_in_their_transaction() -> None:
    r = rig(synchronous=True)
    (one,) = r.held(1)

    async def scenario() -> None:
        r.writer.submit([(one, ok())])
        await idle(r.leases)

    run(r, scenario)
    assert r.store.synchronous_in_transaction == [True]
    assert one.execution_id in r.store.finished


def test_heartbeats_renew_held_leases_and_lose_the_others_once() -> None:
    r = rig()
    kept, stolen = r.held(2, heartbeat_interval="30s")
    del r.store.held[stolen.execution_id]  # closed out or stolen by another replica
    for one in (kept, stolen):
        one.renewed(-30.0)  # due now: renewed one 30 s interval before 0

    async def scenario() -> None:
        while not r.store.beats or kept.next_beat == 0.0:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.05)  # several more beat intervals: nothing is due again

    run(r, scenario)
    assert r.store.beats == [[kept.execution_id, stolen.execution_id]]
    assert kept.next_beat > 0 and not kept.liveness.known_lost
    assert stolen.liveness.known_lost and r.rec.report.leases_lost == 1
    assert len(r.leases) == 2, "a lost lease's handler still runs: its outcome frees the slot"


def test_a_heartbeat_never_runs_beside_a_terminal_write() -> None:
    r = rig()
    writing, beating = r.held(2)
    r.store.gate = asyncio.Event()

    async def scenario() -> None:
        assert r.store.gate is not None
        r.writer.submit([(writing, ok())])
        while not r.store.batches:
            await asyncio.sleep(0.001)
        beating.renewed(-beating.job.heartbeat_interval.total_seconds())  # due while the
        # write holds the lock
        await asyncio.sleep(0.05)  # many beat intervals
        assert r.store.beats == [], "the heartbeat waited for the write's lock"
        r.store.gate.set()
        while not r.store.beats:
            await asyncio.sleep(0.001)

    run(r, scenario)
    assert r.store.most_busy == 1


def test_after_a_failover_recent_writes_and_held_claims_are_put_back() -> None:
    r = rig()
    finished, running = r.held(2)
    transactional, failed_transactional = r.held(2, transactional=True)
    old = Server("7000000000000000001", 1, "db-a:5432")
    new = Server("7000000000000000001", 2, "db-b:5432")

    async def scenario() -> None:
        r.writer.submit([(finished, ok())])
        r.writer.submit([(failed_transactional, ok("FAILED"))])  # a failure goes through the writer
        while len(r.store.finished) < 2:
            await asyncio.sleep(0.001)
        await r.writer.reapply(None, old, r.writer._pool.conn)  # type: ignore[attr-defined]
        assert r.store.reapplied == [], "the first server met: nothing to put back"
        await r.writer.reapply(old, new, r.writer._pool.conn)  # type: ignore[attr-defined]

    run(r, scenario)
    (rows,) = r.store.reapplied
    by_id = {row.id: row for row in rows}
    assert set(by_id) == {finished.execution_id, running.execution_id}
    assert by_id[finished.execution_id].status == "SUCCESS"
    assert isinstance(by_id[finished.execution_id].outcome, Finish)
    assert (by_id[running.execution_id].status, by_id[running.execution_id].token) == (
        "RUNNING",
        running.run.lease_token,
    )
    assert transactional.execution_id not in by_id, "its effect and rows vanish together"
    assert failed_transactional.execution_id not in by_id


def test_a_lease_whose_outcome_landed_while_its_beat_waited_is_not_lost() -> None:
    """The beat picks a lease, then waits for the lock the lease's own terminal write holds;
    by the time it runs, the row is no longer RUNNING: that is the write landing, not a loss."""
    r = rig()
    (done,) = r.held(1)
    r.store.gate = asyncio.Event()

    async def scenario() -> None:
        assert r.store.gate is not None
        r.writer.submit([(done, ok())])
        while not r.store.batches:
            await asyncio.sleep(0.001)
        done.renewed(-done.job.heartbeat_interval.total_seconds())  # due while its own
        # write holds the lock
        await asyncio.sleep(0.05)
        r.store.gate.set()  # the write lands (the row no longer RUNNING), then the beat runs
        while not r.store.beats:
            await asyncio.sleep(0.001)
        await idle(r.leases)

    run(r, scenario)
    assert r.store.finished[done.execution_id].status == "SUCCESS"
    assert not done.liveness.known_lost and r.rec.report.leases_lost == 0
