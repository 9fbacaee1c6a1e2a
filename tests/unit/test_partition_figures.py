"""The engine's partition figures: which claims look up their partitions' planner figures, and
which partitions it analyzes (the statements themselves run against PostgreSQL in
tests/integration/test_partitioned_ledger.py)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any, cast

from pgsched._engine.figures import LOOK_AGAIN_AFTER, LedgerFigures
from pgsched._records import PartitionFigures as Figures
from pgsched._storage.statements import Conn
from pgsched._storage.store import Store
from tests.unit.engine_fakes import PLAN, claim

DAY = timedelta(days=1)
TODAY = PLAN.replace(hour=0)


class FigureStore:
    """The two statements, over partitions kept in memory (name -> figures)."""

    def __init__(self, parts: list[Figures]) -> None:
        self.parts = {p.name: p for p in parts}
        self.looked_up: list[tuple[datetime, datetime]] = []
        self.analyzed: list[str] = []

    async def partition_figures(self, conn: Any, first: datetime, last: datetime) -> list[Figures]:
        self.looked_up.append((first, last))
        return [p for p in self.parts.values() if p.lo <= last and p.hi > first]

    async def analyze_partition(self, conn: Any, name: str) -> None:
        self.analyzed.append(name)


def part(
    name: str,
    lo: datetime,
    *,
    unanalyzed: bool = False,
    empty: bool = False,
    outgrown: bool = False,
    rows: int = 0,
) -> Figures:
    return Figures(name, lo, lo + DAY, unanalyzed, empty, outgrown, rows)


# The fake store never reads the connection the figures pass it.
NO_CONN = cast(Conn, None)


def claims_at(*plans: datetime, kind: str = "won") -> list[Any]:
    return [claim(plan=p, kind=kind) for p in plans]


def figures(store: FigureStore) -> LedgerFigures:
    return LedgerFigures(cast(Store, store))


def test_a_partition_without_figures_is_analyzed_once_then_never_looked_up_again() -> None:
    store = FigureStore([part("today", TODAY, unanalyzed=True)])
    known = figures(store)
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN, PLAN + timedelta(minutes=1))))
    assert store.analyzed == ["today"]
    assert store.looked_up == [(PLAN, PLAN + timedelta(minutes=1))]
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN + timedelta(hours=1))))
    assert (store.analyzed, len(store.looked_up)) == (["today"], 1)


def test_a_partition_with_figures_is_remembered_without_analyzing() -> None:
    store = FigureStore([part("today", TODAY)])
    known = figures(store)
    for _ in range(3):
        asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN)))
    assert (store.analyzed, len(store.looked_up)) == ([], 1)


def test_an_empty_partition_is_looked_up_again_and_the_next_day_on_its_own() -> None:
    """Empty, it has nothing to analyze yet: the next claim into it looks again. A claim of
    the next day's plans looks up that partition: the first one's span does not hold them."""
    store = FigureStore([part("today", TODAY, empty=True)])
    known = figures(store)
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN)))
    store.parts["today"] = part("today", TODAY, unanalyzed=True)
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN)))
    assert (store.analyzed, len(store.looked_up)) == (["today"], 2)
    store.parts["tomorrow"] = part("tomorrow", TODAY + DAY, unanalyzed=True)
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN + DAY)))
    assert store.analyzed == ["today", "tomorrow"]


def test_only_new_plans_count_and_plans_with_no_partition_are_remembered() -> None:
    """Retries and steals insert nothing; the DEFAULT partition's plans (no partition of their
    own) are autovacuum's, looked up once."""
    store = FigureStore([])
    known = figures(store)
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN, kind="retry")))
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN, kind="stole")))
    assert store.looked_up == []
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN)))
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN)))
    assert (store.analyzed, store.looked_up) == ([], [(PLAN, PLAN)])


def test_a_remembered_partition_is_looked_up_again_once_this_replica_filled_it_as_much() -> None:
    """Remembered with the planner's 5,000 rows, the partition is looked up again once this
    replica has claimed 5,000 more into it, and analyzed if it outgrew its figures; the
    count that lookup read sets the next one."""
    store = FigureStore([part("today", TODAY, rows=5_000)])
    known = figures(store)
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN)))
    asyncio.run(known.after_claim(NO_CONN, claims_at(*[PLAN] * 4_999)))  # the claims that fill it
    assert (store.analyzed, len(store.looked_up)) == ([], 1)
    store.parts["today"] = part("today", TODAY, outgrown=True, rows=20_000)
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN)))
    assert (store.analyzed, len(store.looked_up)) == (["today"], 2)
    for _ in range(3):
        asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN)))
    assert len(store.looked_up) == 2


def test_a_small_partition_is_looked_up_again_after_a_thousand_rows_kept_if_not_outgrown() -> None:
    store = FigureStore([part("today", TODAY, rows=64)])
    known = figures(store)
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN)))  # looked up, remembered
    asyncio.run(known.after_claim(NO_CONN, claims_at(*[PLAN] * (LOOK_AGAIN_AFTER - 1))))
    assert len(store.looked_up) == 1
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN)))  # the 1,000th row since: look again
    assert (store.analyzed, len(store.looked_up)) == ([], 2)
    asyncio.run(known.after_claim(NO_CONN, claims_at(PLAN)))
    assert len(store.looked_up) == 2
