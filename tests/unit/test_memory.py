"""The write memory (``pgsched._engine.memory``): each landed write comes back as the row it
was, its outcome included, the latest write of an execution winning; a held lease comes back
as its claim; a transactional job's writes are never kept; and what is kept holds no object
the garbage collector must scan."""

from __future__ import annotations

import gc
from datetime import timedelta

import pgsched
from pgsched._engine.memory import WriteMemory, claim_row
from pgsched._engine.values import Lease
from pgsched._records import Finish
from tests.unit.engine_fakes import PLAN, job, lease


def _finish(one: Lease, status: str, **fields: object) -> Finish:
    values: dict[str, object] = {
        "error_code": None,
        "error_msg": None,
        "rows_affected": None,
        "result_json": None,
        "duration_ms": 7,
        "retry_delay_s": None,
    } | fields
    return Finish(one.execution_id, one.run.lease_token, one.run.plan_time, status, **values)  # type: ignore[arg-type]


def test_each_write_comes_back_as_the_row_it_was_but_its_traceback() -> None:
    """... and a held lease comes back as its claim. A traceback (up to 16 KiB) is not kept:
    the row put back carries none, the attempt history has it."""
    memory = WriteMemory()
    spec = job(overlap="forbid", max_attempts=3)
    failed, done, held = (lease(spec, scope=pgsched.Scope("t", s), attempt=1) for s in "abc")
    failure = _finish(
        failed, "FAILED", error_code="boom", error_msg="it broke", retry_delay_s=2.5, traceback="tb"
    )
    retry_at = PLAN + timedelta(seconds=3)
    memory.remember(failed, failure, retry_at)
    memory.remember(done, _finish(done, "FAILED", error_code="first"), retry_at)
    success = _finish(done, "SUCCESS", rows_affected=4, result_json='{"n": 4}')
    memory.remember(done, success, None)  # the latest write of an execution wins

    rows = {row.id: row for row in memory.rows([held])}

    assert rows == {
        failed.execution_id: claim_row(failed, failure._replace(traceback=None), retry_at),
        done.execution_id: claim_row(done, success, None),
        held.execution_id: claim_row(held),
    }


def test_a_transactional_jobs_writes_are_not_kept() -> None:
    memory = WriteMemory()
    one = lease(job(transactional=True))
    memory.remember(one, _finish(one, "SUCCESS"), None)
    assert memory.rows([one]) == []


def test_what_is_kept_leaves_the_garbage_collectors_lists() -> None:
    memory = WriteMemory()
    spec = job(overlap="allow")
    for i in range(100):
        one = lease(spec, scope=pgsched.Scope("t", str(i)))
        memory.remember(one, _finish(one, "SUCCESS"), None)
    gc.collect()
    kept = list(memory._writes)
    assert len(kept) == 100
    assert not any(gc.is_tracked(packed) for packed in kept)
