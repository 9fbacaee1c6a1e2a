"""Render the figures of the failover scenarios (the JSON that PGSCHED_FAILOVER_FIGURES
names; one file per run) as the Markdown tables of docs/reliability.md, a column per run:
``python -m tests.failover.render run1.json run2.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SCENARIOS = [
    "async_crash",
    "sync_crash",
    "lagging_async",
    "switchover",
    "old_primary_back",
    "vanished_primary",
]
ROWS = [
    ("resumed_s", "s from the promotion to the first SUCCESS of a run started after it"),
    ("work_reruns", "`work` plans run twice (effect recorded twice on the side server)"),
    ("work_reruns_finished_before_fault", "... whose first run had ended 1 s before the fault"),
    (
        "work_reruns_finished_before_fault_same_runner",
        "... of those, run again by the replica that had run them",
    ),
    ("work_lost", "`work` plans lost (no SUCCESS on the final primary, no effect)"),
    ("tx_duplicates", "`tx` plans whose effect committed twice on the final primary"),
    ("tx_reinvoked", "`tx` plans whose handler ran again (the first run rolled back)"),
    ("tx_lost", "`tx` plans lost"),
    ("plans_counted", "plans counted (both jobs, every scope)"),
    ("stale_running", "rows RUNNING past their lease at the end"),
    ("running_after_stop", "rows RUNNING once both replicas stopped"),
    ("stale_stolen", "stale leases taken over"),
    ("fencing_regressions", "runs after the promotion with a fencing token not above one before"),
    ("healthz_503", "/healthz 503 answers (of the samples)"),
    ("healthz_200_while_stuck", "/healthz 200 while its replica had run nothing for 30 s"),
    ("tick_errors", "`tick_error` logged"),
    ("clean_exits", "both replicas exit 0 on SIGTERM"),
    ("old_primary_rows", "ledger rows written on the old primary after it came back"),
    ("old_primary_tx_effects", "`tx` effects committed on the old primary"),
    ("tx_on_both_servers", "... of plans whose `tx` effect committed on the new primary too"),
    ("tx_rolled_back", "`tx` runs rolled back: their SUCCESS write matched no lease"),
    ("wal_lost_bytes", "WAL the promoted standby never received (bytes)"),
]


def _cell(figures: dict[str, Any], key: str) -> str:
    if key not in figures:
        return "-"
    value = figures[key]
    if key == "healthz_503":
        return f"{value} of {figures.get('healthz_samples')}"
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def render(runs: list[dict[str, Any]]) -> str:
    out: list[str] = []
    for name in SCENARIOS:
        results = [run.get(name, {}) for run in runs]
        out += [f"#### `{name}`", ""]
        out.append("| figure | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " |")
        out.append("|---|" + "---|" * len(runs))
        for key, label in ROWS:
            if any(key in r for r in results):
                out.append(f"| {label} | " + " | ".join(_cell(r, key) for r in results) + " |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(render([json.loads(Path(path).read_text()) for path in sys.argv[1:]]))
