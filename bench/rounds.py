"""Rounds: every workload's trials repeated, so that one ratio does not stand for a machine
whose speed drifts.

On the 2-core machine the benchmark was built on, the same commit's fan-out ratio to raw +
handler moved from 1.60 to 1.01 between two runs four minutes apart: a trial takes seconds,
and the machine's speed changes by up to twice within minutes. With ``--rounds N`` each
workload runs every scheduler N times, round after round, in alternating order (so neither
side always runs first); ratios are taken within a round, and the round whose subject's
fan-out ratio to raw + handler is the median stands for the workload in the results (the
lower median for an even count). Every round's ratios are kept beside it (``rounds``), for
the subject and for pgsched's batch handler (``pgsched_batch``), whose goals are against the
raw limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench import measure
from bench.registry import CEILINGS

SUBJECT = "pgsched"
# Schedulers whose every round's ratios are kept (``rounds``) beside the median round's.
ROUNDS_KEPT = (SUBJECT, "pgsched_batch")
_RATIO = "fanout_to_handler_limit"


def order(schedulers: Sequence[str], round_no: int) -> list[str]:
    """The schedulers in the order round ``round_no`` runs them: reversed every other round."""
    return list(schedulers) if round_no % 2 == 0 else list(reversed(schedulers))


def rotated(keys: Sequence[str], round_no: int) -> list[str]:
    """``keys`` in the order round ``round_no`` runs them: each round starts one further on,
    so that every configuration runs first (and after each other) as often as the others."""
    shift = round_no % len(keys) if keys else 0
    return [*keys[shift:], *keys[:shift]]


def settle(trials: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per (workload, scheduler) from ``trials`` (each with its ``round``): those of
    the median round of each workload, with ratios taken within that round and ``rounds``,
    every round's ratios of the subject."""
    by_round: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for trial in trials:
        by_round.setdefault((trial["workload"], trial["round"]), []).append(trial)
    for group in by_round.values():
        measure.add_ratios(group)
    results: list[dict[str, Any]] = []
    for workload in dict.fromkeys(t["workload"] for t in trials):
        rounds = sorted(r for w, r in by_round if w == workload)
        ratios = {r: _ratios(by_round[workload, r], SUBJECT) for r in rounds}
        chosen = _median_round(rounds, ratios)
        for trial in by_round[workload, chosen]:
            if trial["scheduler"] in ROUNDS_KEPT:
                key = trial["scheduler"]
                trial["rounds"] = [_ratios(by_round[workload, r], key) for r in rounds]
            results.append(trial)
    return results


def _ratios(group: list[dict[str, Any]], scheduler: str) -> dict[str, Any]:
    subject = next((t for t in group if t["scheduler"] == scheduler), {})
    kinds = ("ratio", "fanout", "p99")
    keys = [f"{kind}_to_{suffix}" for suffix in CEILINGS.values() for kind in kinds]
    keys += [f"claim_per_row_to_{suffix}" for suffix in CEILINGS.values()]
    return {"round": group[0]["round"], **{k: subject.get(k) for k in keys if k in subject}}


def _median_round(rounds: list[int], ratios: dict[int, dict[str, Any]]) -> int:
    measured = sorted((ratios[r][_RATIO], r) for r in rounds if ratios[r].get(_RATIO) is not None)
    if not measured:
        return rounds[0]
    return measured[(len(measured) - 1) // 2][1]
