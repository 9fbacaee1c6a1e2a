"""First sight's writes without a database: a job's scopes are written when they (or its
schedule) change, never on a tick that sees the same ones."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pgsched
from pgsched._engine.sighting import Sightings
from tests.unit.engine_fakes import job, recorder

NOW = datetime(2027, 3, 10, 12, 0, 0, 300_000, tzinfo=UTC)


class _Store:
    def __init__(self) -> None:
        self.writes: list[tuple[str, Any]] = []
        self.others: list[dict[str, Any]] = []  # the other live replicas' rows
        self.mine: dict[str, str] = {}  # this replica's row's digests

    async def sight_cursors(self, conn: Any, name: str, seen: Any) -> dict[str, Any]:
        self.writes.append((name, seen))
        self.mine[name] = seen.digest
        agreed = all(r["digests"].get(name) == seen.digest for r in self._running(name))
        return {"seen": len(seen.kinds), "retired": 0, "respecified": 0, "agreed": agreed}

    async def scope_digests(self, conn: Any) -> list[dict[str, Any]]:
        return [*self.others, {"runner_id": "r1", "jobs": list(self.mine), "digests": self.mine}]

    def _running(self, name: str) -> list[dict[str, Any]]:
        return [r for r in self.others if name in r["jobs"]]


def _sightings(store: _Store) -> Sightings:
    return Sightings(store, recorder(), timedelta(seconds=1), "r1", recheck_every=0.0)  # type: ignore[arg-type]


def test_scopes_are_written_only_when_they_change() -> None:
    answer = [pgsched.Scope("t", "a")]
    spec = job(every="1h", scopes=lambda now: list(answer))
    store = _Store()
    sightings = _sightings(store)

    def see(at: datetime) -> bool:
        return asyncio.run(sightings.see(None, spec, at))[1]  # type: ignore[arg-type]

    assert see(NOW)
    assert not see(NOW + timedelta(seconds=1))
    assert not see(NOW + timedelta(seconds=2))
    answer.append(pgsched.Scope("t", "b"))
    assert see(NOW + timedelta(seconds=3))
    assert [w[1].ids for w in store.writes] == [["a"], ["a", "b"]]
    first = store.writes[0][1]
    # seen at 12:00:00.3 with a 1 s tick: the 12:00 plan still counts
    assert first.first == datetime(2027, 3, 10, 12, 0, tzinfo=UTC)
    assert first.seen_at == NOW


def test_a_failing_scopes_callable_writes_nothing_and_keeps_the_last_scopes() -> None:
    calls = {"n": 0}

    def scopes(now: datetime) -> list[pgsched.Scope]:
        calls["n"] += 1
        if calls["n"] > 1:
            raise RuntimeError("tenant service down")
        return [pgsched.Scope("t", "a")]

    spec = job(every="1h", scopes=scopes)
    store = _Store()
    sightings = _sightings(store)
    known, wrote = asyncio.run(sightings.see(None, spec, NOW))  # type: ignore[arg-type]
    assert wrote and set(known) == {("t", "a")}
    known, wrote = asyncio.run(sightings.see(None, spec, NOW))  # type: ignore[arg-type]
    assert not wrote and set(known) == {("t", "a")}
    assert len(store.writes) == 1


def test_a_list_written_while_replicas_disagree_is_written_again_once_they_agree() -> None:
    """A rolling update: another live replica lists other scopes of the job (its digest
    differs), so this replica's write retires nothing; once that replica is gone, the list
    is written again (and retires then). A replica that does not run the job has no say."""
    spec = job(name="j", every="1h", scopes=lambda now: [pgsched.Scope("t", "a")])
    store = _Store()
    store.others = [
        {"runner_id": "v1", "jobs": ["j"], "digests": {"j": "an older list"}},
        {"runner_id": "v1-other", "jobs": ["other"], "digests": {}},
    ]
    sightings = _sightings(store)

    def tick(at: datetime) -> bool:
        asyncio.run(sightings.settle(None))  # type: ignore[arg-type]
        return asyncio.run(sightings.see(None, spec, at))[1]  # type: ignore[arg-type]

    assert tick(NOW)
    assert not tick(NOW + timedelta(seconds=1))  # still disagreeing: nothing to redo
    store.others = store.others[1:]  # the older replica stopped
    assert tick(NOW + timedelta(seconds=2))
    assert not tick(NOW + timedelta(seconds=3))
    # An older replica starts again and writes its own list: once it is gone, again.
    store.others = [{"runner_id": "v1", "jobs": ["j"], "digests": {"j": "an older list"}}]
    assert not tick(NOW + timedelta(seconds=4))
    store.others = []
    assert tick(NOW + timedelta(seconds=5))
    assert len(store.writes) == 3


def test_a_list_its_own_row_lost_is_written_again() -> None:
    """A replica whose row was deleted past its expiry registers again with no digests: its
    peers would count it as disagreeing for ever, so it writes its list again."""
    spec = job(name="j", every="1h", scopes=lambda now: [pgsched.Scope("t", "a")])
    store = _Store()
    sightings = _sightings(store)

    def tick(at: datetime) -> bool:
        asyncio.run(sightings.settle(None))  # type: ignore[arg-type]
        return asyncio.run(sightings.see(None, spec, at))[1]  # type: ignore[arg-type]

    assert tick(NOW)
    assert not tick(NOW + timedelta(seconds=1))
    store.mine.clear()  # the row came back empty
    assert tick(NOW + timedelta(seconds=2))
    assert store.mine == {"j": store.writes[-1][1].digest}
    assert not tick(NOW + timedelta(seconds=3))
