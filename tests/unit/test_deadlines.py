"""Run deadlines (``pgsched._engine.deadlines``): a deadline cancels its attempt's task, once;
a disarmed one never does; a short run_timeout armed after a long one still fires on time;
finished attempts are not kept alive; a deadline armed on a new event loop fires there."""

from __future__ import annotations

import asyncio
import gc
import weakref

from pgsched._engine.deadlines import RunDeadlines
from pgsched._engine.values import Lease
from tests.unit.engine_fakes import job, lease


async def _sleeper(one: Lease) -> Lease:
    one.task = asyncio.create_task(asyncio.sleep(30))
    return one


async def _cancelled_within(one: Lease, seconds: float) -> bool:
    assert one.task is not None
    try:
        await asyncio.wait_for(asyncio.shield(one.task), seconds)
    except asyncio.CancelledError:
        return True
    except TimeoutError:
        one.task.cancel()
    return False


def test_a_deadline_cancels_its_attempt_once_and_disarming_says_so() -> None:
    async def scenario() -> None:
        deadlines = RunDeadlines()
        one = await _sleeper(lease(job()))
        deadlines.arm(one, 0.05)
        assert await _cancelled_within(one, 5)
        assert deadlines.disarm(one) is True
        assert deadlines.disarm(one) is False

    asyncio.run(scenario())


def test_a_disarmed_deadline_cancels_nothing() -> None:
    async def scenario() -> None:
        deadlines = RunDeadlines()
        one = await _sleeper(lease(job()))
        deadlines.arm(one, 0.05)
        assert deadlines.disarm(one) is False
        assert not await _cancelled_within(one, 0.3)

    asyncio.run(scenario())


def test_a_short_run_timeout_armed_after_a_long_one_fires_on_time() -> None:
    async def scenario() -> None:
        deadlines = RunDeadlines()
        spec = job()
        long, short = await _sleeper(lease(spec)), await _sleeper(lease(spec))
        deadlines.arm(long, 3600)
        deadlines.arm(short, 0.05)
        assert await _cancelled_within(short, 5)
        assert long.task is not None and not long.task.done()
        long.task.cancel()

    asyncio.run(scenario())


def test_finished_attempts_are_not_kept_alive() -> None:
    """A replica runs thousands of attempts a minute under a run_timeout of minutes: the
    deadlines of those that ended must not hold their leases until they would have fired."""

    async def scenario() -> int:
        deadlines = RunDeadlines()
        spec = job()
        alive: list[weakref.ref[Lease]] = []
        for _ in range(10_000):
            one = lease(spec)
            deadlines.arm(one, 3600)
            deadlines.disarm(one)
            alive.append(weakref.ref(one))
        gc.collect()
        return sum(ref() is not None for ref in alive)

    assert asyncio.run(scenario()) <= 2_000


def test_a_deadline_armed_on_a_new_event_loop_fires_there() -> None:
    deadlines = RunDeadlines()

    async def first() -> None:
        one = await _sleeper(lease(job()))
        deadlines.arm(one, 3600)  # its timer dies with this loop
        assert one.task is not None
        one.task.cancel()

    async def second() -> bool:
        one = await _sleeper(lease(job()))
        deadlines.arm(one, 0.05)
        return await _cancelled_within(one, 5)

    asyncio.run(first())
    assert asyncio.run(second())
