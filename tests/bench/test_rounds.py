"""The benchmark's rounds (``--rounds N``): ratios taken within a round, and the round with
pgsched's median fan-out ratio to raw + handler standing for the workload."""

from __future__ import annotations

from typing import Any

from bench import rounds


def trial(workload: str, scheduler: str, round_no: int, fanout: float) -> dict[str, Any]:
    return {
        "workload": workload,
        "scheduler": scheduler,
        "round": round_no,
        "status": "ok",
        "fanout_s": fanout,
        "lag_p99_s": fanout,
        "plans_per_s": 100 / fanout,
        "claim_us_per_row": 10.0,
    }


def test_the_round_with_the_median_ratio_stands_with_its_own_limits() -> None:
    """raw + handler then pgsched: 1.0 / 1.6 s, 1.5 / 1.5 s, 1.2 / 1.44 s: ratios 1.6, 1.0,
    1.2 -> the third round stands, with the third round's limits."""
    trials = []
    for r, (handler, pgsched) in enumerate([(1.0, 1.6), (1.5, 1.5), (1.2, 1.44)]):
        trials += [trial("c", "raw", r, 0.3), trial("c", "raw_handler", r, handler)]
        trials += [trial("c", "pgsched", r, pgsched)]
    results = {r["scheduler"]: r for r in rounds.settle(trials)}
    assert {r["round"] for r in results.values()} == {2}
    assert results["pgsched"]["fanout_to_handler_limit"] == 1.2
    assert [r["fanout_to_handler_limit"] for r in results["pgsched"]["rounds"]] == [1.6, 1.0, 1.2]


def test_an_even_count_takes_the_lower_median_and_workloads_stay_apart() -> None:
    trials = []
    for r, pgsched in enumerate([2.0, 1.1]):
        trials += [trial("b", "raw_handler", r, 1.0), trial("b", "pgsched", r, pgsched)]
    trials += [trial("a", "raw_handler", 0, 1.0), trial("a", "pgsched", 0, 0.5)]
    results = rounds.settle(trials)
    chosen = {(r["workload"], r["scheduler"]): r["round"] for r in results}
    assert chosen == {
        ("b", "raw_handler"): 1,
        ("b", "pgsched"): 1,
        ("a", "raw_handler"): 0,
        ("a", "pgsched"): 0,
    }


def test_rounds_alternate_the_order() -> None:
    keys = ["raw", "raw_handler", "pgsched"]
    assert rounds.order(keys, 0) == keys
    assert rounds.order(keys, 1) == ["pgsched", "raw_handler", "raw"]
