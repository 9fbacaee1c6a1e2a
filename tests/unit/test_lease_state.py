"""A lease's lifecycle, which only its own methods change: its state (claimed, submitted,
abandoned), finished (its slot free), and its heartbeat timing."""

from __future__ import annotations

import asyncio

import pgsched
from pgsched._engine.values import LeaseState
from tests.unit.engine_fakes import job, lease


def test_a_fresh_lease_is_undecided_and_due_for_a_beat_one_interval_after_its_claim() -> None:
    spec = job(heartbeat_interval="10s")
    one = lease(spec, scope=pgsched.Scope("s", "1"))
    assert one.state is LeaseState.CLAIMED
    assert not (one.submitted or one.abandoned or one.done or one.decided)
    assert one.next_beat == one.claimed_at + 10
    assert not one.beat_due(one.claimed_at + 9.9) and one.beat_due(one.claimed_at + 10)


def test_a_renewal_moves_the_next_beat_one_interval_on() -> None:
    one = lease(job(heartbeat_interval="10s"), scope=pgsched.Scope("s", "1"))
    one.renewed(100.0)
    assert one.next_beat == 110.0
    assert not one.beat_due(109.0) and one.beat_due(110.0)


def test_an_abandoned_or_lost_lease_is_never_due_for_a_beat() -> None:
    abandoned, lost = (lease(job(), scope=pgsched.Scope("s", str(i))) for i in range(2))
    abandoned.abandon()
    lost.liveness.mark_lost()
    far = abandoned.next_beat + 3600
    assert not abandoned.beat_due(far) and not lost.beat_due(far)
    assert abandoned.state is LeaseState.ABANDONED and abandoned.decided


def test_abandoned_then_submitted_stays_abandoned_and_finishing_twice_is_harmless() -> None:
    one = lease(job(), scope=pgsched.Scope("s", "1"))
    one.abandon()
    one.submit()  # shutdown's FAILED outcome, queued
    assert one.state is LeaseState.ABANDONED and one.submitted and not one.done
    one.finish()
    one.finish()
    assert one.done and one.abandoned and one.decided  # its handler's late outcome is dropped


def test_a_submitted_lease_is_decided_and_still_beats_until_its_write_lands() -> None:
    one = lease(job(heartbeat_interval="10s"), scope=pgsched.Scope("s", "1"))
    one.submit()
    assert one.state is LeaseState.SUBMITTED and one.submitted and one.decided
    assert not one.abandoned and not one.done
    assert one.beat_due(one.next_beat)  # the writer may be retrying it: its row stays held
    one.finish()
    assert one.done and one.state is LeaseState.SUBMITTED


def test_a_lease_lost_and_freed_is_decided_with_no_outcome() -> None:
    one = lease(job(), scope=pgsched.Scope("s", "1"))
    one.liveness.mark_lost()
    one.finish()
    assert one.done and one.decided
    assert one.state is LeaseState.CLAIMED and not (one.submitted or one.abandoned)


def test_a_chained_lease_waits_for_the_one_before_it() -> None:
    spec = job(overlap="forbid")
    earlier, later = (lease(spec, scope=pgsched.Scope("s", "1")) for _ in range(2))
    later.chain_after(earlier)
    assert later.previous is earlier

    async def scenario() -> None:
        assert later.previous is not None
        waiting = asyncio.create_task(later.previous.wait_done())
        await asyncio.sleep(0.01)
        assert not waiting.done()
        earlier.finish()
        await asyncio.wait_for(waiting, 1)

    asyncio.run(scenario())
