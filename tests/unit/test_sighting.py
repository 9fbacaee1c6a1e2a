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

    async def sight_cursors(self, conn: Any, name: str, seen: Any) -> dict[str, int]:
        self.writes.append((name, seen))
        return {"seen": len(seen.kinds), "retired": 0, "respecified": 0}


def test_scopes_are_written_only_when_they_change() -> None:
    answer = [pgsched.Scope("t", "a")]
    spec = job(every="1h", scopes=lambda now: list(answer))
    store = _Store()
    sightings = Sightings(store, recorder(), timedelta(seconds=1))  # type: ignore[arg-type]

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
    sightings = Sightings(store, recorder(), timedelta(seconds=1))  # type: ignore[arg-type]
    known, wrote = asyncio.run(sightings.see(None, spec, NOW))  # type: ignore[arg-type]
    assert wrote and set(known) == {("t", "a")}
    known, wrote = asyncio.run(sightings.see(None, spec, NOW))  # type: ignore[arg-type]
    assert not wrote and set(known) == {("t", "a")}
    assert len(store.writes) == 1
