"""Render the figures JSON of a chaos run as the Markdown tables of docs/reliability.md.

PGSCHED_CHAOS_LONG=1 PGSCHED_CHAOS_FIGURES=figures.json pytest -m chaos
python -m tests.chaos.render figures.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ORDER = [
    "baseline",
    "kill9",
    "pg_restart",
    "terminate",
    "sigstop",
    "proxy",
    "mid_claim",
    "mid_commit",
    "clock_skew",
]


def _fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _lost(lost: dict[str, Any]) -> str:
    if "not_taken_over" not in lost:
        return str(lost["logged"])
    return f"{lost['logged']} / {lost['taken_over']} / {lost['not_taken_over']}"


def _o6(f: dict[str, Any]) -> str:
    strict, allowed = f["O6_running_rows_too_old"], f.get("O6_with_latency_allowance")
    return str(strict) if allowed in (None, strict) else f"{strict} ({allowed})"


def _row(cells: list[Any]) -> str:
    return "| " + " | ".join(_fmt(c) for c in cells) + " |"


def render(data: dict[str, Any]) -> str:
    names = [n for n in ORDER if n in data] + sorted(set(data) - set(ORDER))
    out = [
        "| scenario | run | faults | window s | plans | O1 | O2 | O3 | O4 n | O4 p50 s | O4 p99 s "
        "| O4 max s | O5 p99 s | O6 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        f = data[name]
        o4, o5 = f["O4_abandonment_to_steal_s"], f["O5_start_delay_s"]
        faults = ", ".join(f"{k} {v:g}" for k, v in f.get("durations_s", {}).items())
        out.append(
            _row(
                [
                    name,
                    f.get("profile"),
                    faults,
                    f["window_s"],
                    f["plans_checked"],
                    f["O1_plans_with_more_than_one_success"],
                    f["O2_accepted_writes_from_older_lease"],
                    f["O3_plans_without_terminal_row"],
                    o4["n"],
                    o4["p50"],
                    o4["p99"],
                    o4["max"],
                    o5["p99"],
                    _o6(f),
                ]
            )
        )
    out += [
        "",
        "| scenario | claims | steals | lease_lost logged / taken over / false alarm "
        "| handler told | tx ledger: plans / with duplicates | plain ledger: plans / re-run "
        "| failed for good |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        f = data[name]
        led, runs = f["ledger"], f["runs"]
        out.append(
            _row(
                [
                    name,
                    runs["claims"],
                    runs["steals"],
                    _lost(f["lease_lost"]),
                    f["lease_lost"]["handler_told"],
                    f"{led['tx']['plans']} / {led['tx']['plans_with_duplicates']}",
                    f"{led['plain']['plans']} / {led['plain']['plans_with_duplicates']}",
                    sum(f["O3_detail"]["failed_for_good"].values()),
                ]
            )
        )
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tests.chaos.render FIGURES.json", file=sys.stderr)
        return 2
    sys.stdout.write(render(json.loads(Path(argv[1]).read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
