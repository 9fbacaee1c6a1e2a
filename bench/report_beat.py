"""The "HA Celery beat" section of docs/performance.md, from bench/results/beat.json (written
by ``python -m bench.beat``): every round's figures, their median, and the goals beside them.
``python -m bench.beat`` rewrites the section in place, as ``python -m bench.report_beat
[beat.json]`` does without running anything; ``python -m bench.report`` keeps it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench import REPO
from bench.shared import RESULTS

DOC = REPO / "docs" / "performance.md"

BEAT_JSON = RESULTS / "beat.json"
HEADING = "## HA Celery beat"
# The page's section the beat's goes before when the page has none yet.
BEFORE = "## Where pgsched's database time went"
LAG_RATIO_GOAL = 1.5

COLUMNS = (
    ("published", "published"),
    ("duplicated", "duplicated"),
    ("duplicated_new_task_id", "of them under a new task id"),
    ("lost", "lost"),
    ("lost_after_kill", "lost after the kill"),
    ("lag_p50_s", "lag p50 (s)"),
    ("lag_p99_s", "lag p99 (s)"),
    ("lag_max_s", "lag max (s)"),
    ("longest_silence_s", "longest silence (s)"),
)


def load(path: Path = BEAT_JSON) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{int(value):,}" if value.is_integer() else f"{value:.3f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def row(label: str, figures: dict[str, Any]) -> str:
    if figures.get("status", "ok") != "ok":
        return f"| {label} | not run: {figures.get('reason', '')} |" + " |" * (len(COLUMNS) - 1)
    return "| " + " | ".join([label, *(fmt(figures.get(k)) for k, _ in COLUMNS)]) + " |"


def header(first: str) -> list[str]:
    names = [first, *(name for _, name in COLUMNS)]
    return ["| " + " | ".join(names) + " |", "|---|" + "--:|" * len(COLUMNS)]


def goals(beat: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    """(goal, met or None when not measured, evidence), each over every round."""
    trials = {key: _ran(beat, key) for key in beat["configs"]}
    median = beat.get("median", {})
    out: list[tuple[str, bool | None, str]] = []
    mine = trials.get("pgsched", [])
    dups, lost = [t["duplicated"] for t in mine], [t["lost"] for t in mine]
    out.append(
        (
            "pgsched: 0 duplicates and 0 lost plans, the kill included",
            bool(mine) and not any(dups) and not any(lost) if mine else None,
            f"duplicated {_each(dups)}, lost {_each(lost)} of {_each(mine, 'expected')}",
        )
    )
    two = trials.get("beat2", [])
    out.append(
        (
            "two plain beats duplicate every plan (until one is killed)",
            all(
                t["duplicated_a_cadence_before_kill"] == t["published_a_cadence_before_kill"]
                for t in two
            )
            if two
            else None,
            f"sent twice: {_each(two, 'duplicated_a_cadence_before_kill')} of "
            f"{_each(two, 'published_a_cadence_before_kill')} plans due a cadence or more "
            f"before the kill; {_each(two, 'duplicated')} of {_each(two, 'published')} in all",
        )
    )
    out.append(_redbeat_goal(beat, trials.get("redbeat", [])))
    out.append(
        _lag_goal(median.get("pgsched", {}), median.get("beat_grid", {}), median.get("beat", {}))
    )
    return out


def _redbeat_goal(beat: dict[str, Any], red: list[dict[str, Any]]) -> tuple[str, bool | None, str]:
    shape = beat["shape"]
    lock = shape["redbeat_max_loop_s"] * 5
    every, entries = shape["every_s"], shape["entries"]
    # Lost: the plans from the kill until the lock expires and a standby, trying the lock
    # once a loop interval, takes it (then it sends each overdue entry once).
    low, high = lock // every - 1, (lock + shape["redbeat_max_loop_s"]) // every + 1
    per_entry = [t["lost_after_kill"] / entries for t in red]
    return (
        f"redbeat loses the plans of its lock timeout ({lock:g} s) after the kill",
        all(low <= n <= high for n in per_entry) if red else None,
        f"lost after the kill {_each(red, 'lost_after_kill')} "
        f"({', '.join(f'{n:g}' for n in per_entry)} a entry; {lock:g} s is {lock / every:g} "
        f"plans), longest silence {_each(red, 'longest_silence_s')} s",
    )


def _lag_goal(
    mine: dict[str, Any], grid: dict[str, Any], drift: dict[str, Any]
) -> tuple[str, bool | None, str]:
    """pgsched's p99 lag against a plain beat's on the same plans (``grid``: its entries on
    pgsched's grid, both lags counted from the plan's time); beside it, against a plain
    beat's interval entries (``drift``: only the delay added after each entry's first send)."""
    goal = (
        f"pgsched's p99 publish lag within {LAG_RATIO_GOAL:g} x one plain beat's"
        " (entries on the same grid)"
    )
    ours, theirs = mine.get("lag_p99_s"), grid.get("lag_p99_s")
    if ours is None or not theirs:
        return goal, None, "not measured"
    ratio = ours / theirs
    evidence = f"{ours:.3f} s against {theirs:.3f} s: {ratio:.2f} x"
    if drift.get("lag_p99_s"):
        evidence += (
            f"; against a plain beat's interval entries (their drift only)"
            f" {drift['lag_p99_s']:.3f} s: {ours / drift['lag_p99_s']:.2f} x"
        )
    return goal, ratio <= LAG_RATIO_GOAL, evidence


def _ran(beat: dict[str, Any], key: str) -> list[dict[str, Any]]:
    trials = (r["trials"].get(key) for r in beat["rounds"])
    return [t for t in trials if t and t.get("status") == "ok"]


def _each(trials: list[Any], key: str | None = None) -> str:
    values = [t if key is None else t.get(key) for t in trials]
    return ", ".join(fmt(v) for v in values) or "-"


def section(beat: dict[str, Any]) -> list[str]:
    """The section's lines, its heading first."""
    shape, configs = beat["shape"], beat["configs"]
    lines = [HEADING, "", *_intro(beat), ""]
    lines += ["Median of the rounds:", "", *header("configuration")]
    lines += [row(configs[k]["label"], beat["median"].get(k, {})) for k in configs]
    lines += ["", "Every round (in the order it ran them):", "", *header("round: configuration")]
    for r in beat["rounds"]:
        for key in r["order"]:
            lines.append(row(f"{r['round'] + 1}: {configs[key]['label']}", r["trials"][key]))
    lines += ["", *_ledger(beat)]
    lines += ["", "| goal | met | evidence |", "|---|---|---|"]
    for goal, ok, evidence in goals(beat):
        mark = "yes" if ok else ("not measured" if ok is None else "**no**")
        lines.append(f"| {goal} | {mark} | {evidence} |")
    lines += ["", *_definitions(shape), ""]
    return lines


def _ledger(beat: dict[str, Any]) -> list[str]:
    """pgsched's own account of each round's window, beside the consumer's."""
    parts = []
    for r in beat["rounds"]:
        t = r["trials"].get("pgsched") or {}
        if t.get("status") == "ok":
            rows, skips = _counts(t.get("ledger_rows")), _counts(t.get("ledger_skipped"))
            parts.append(f"round {r['round'] + 1}: rows {rows}; skipped {skips}")
    if not parts:
        return []
    return [
        "pgsched's ledger of the window's plans (its rows by status, and the plans its claims "
        "skipped, by reason, in spans starting in the window): " + "; ".join(parts) + "."
    ]


def _counts(counts: dict[str, int] | None) -> str:
    return ", ".join(f"{n:,} {k}" for k, n in sorted((counts or {}).items())) or "none"


def _intro(beat: dict[str, Any]) -> list[str]:
    shape, m = beat["shape"], beat["machine"]
    return [
        f"`{beat['command']}`, {beat['started'][:16].replace('T', ' ')} UTC, "
        f"{len(beat['rounds'])} round(s), on {m['cores']} cores ({m['cpu']}), Python "
        f"{m['python']}, PostgreSQL {beat['postgres']['version']} "
        f"({beat['postgres']['where']}), Redis as the broker; 1-minute load average "
        f"{beat['loadavg_start']} at the start, {beat.get('loadavg_end')} at the end. "
        f"{shape['entries']} `beat_schedule` entries, each every {shape['every_s']} s "
        f"(`timedelta`), measured for {shape['window_s']:g} s; where a configuration has more "
        f"than one beat, the one that sent the latest message is SIGKILLed "
        f"{shape['kill_at_s']:g} s into the window (redbeat: its lock holder; the window "
        "starts on pgsched's grid, so the kill comes as pgsched's beats claim a plan). "
        "pgsched's "
        "beats share one PostgreSQL; each plain beat has its own schedule file; redbeat's "
        f"beats run with `beat_max_loop_interval = {shape['redbeat_max_loop_s']:g}`, so its "
        f"lock timeout is its default rule, 5 x that ({shape['redbeat_max_loop_s'] * 5:g} s; "
        "with Celery's default of 300 s it would be 25 minutes), and a standby tries the "
        f"lock every {shape['redbeat_max_loop_s']:g} s.",
    ]


def _definitions(shape: dict[str, Any]) -> list[str]:
    every, window = shape["every_s"], shape["window_s"]
    return [
        f"*How it is counted* (`bench/beat_figures.py`). A consumer on a thread of the "
        "bench's process pops each message from the queue's Redis list (kombu only declares "
        "the queue; no task is run) and stamps its arrival. The plan a message publishes: "
        "for pgsched its `pgsched_plan_time` header (pgsched's grid, aligned to the epoch), "
        "and for the plain beat whose entries are on pgsched's grid (due at the multiples of "
        f"{every} s since the epoch) that grid point: both lags count the whole delay from "
        "the plan's time, and the p99 goal compares the two. Plain beat's and redbeat's "
        "interval entries are on no grid (each send is due one cadence after the previous "
        "send), so an entry's first message sets its grid, first "
        f"+ k x {every} s, and a message belongs to the grid point at or before it (up to "
        f"{every / 10:g} s early). That grid's phase absorbs a plain beat's first delay: its "
        "lag counts only the drift it adds after its first send. A plan is in the window "
        "when its time is: "
        f"{window / every:g} slots an entry. *Published*: slots with a message; "
        "*duplicated*: slots with more than one (*under a new task id*: with messages "
        "of more than one task id, which a consumer deduplicating by task id runs twice); "
        "*lost*: slots with none (*after the kill*: "
        "slots from the kill on); *lag*: a plan's first arrival less its time; *longest "
        "silence*: the longest time any entry went without a message in the window. The "
        "broker is the machine's Redis (a database number of its own, a queue per trial): "
        "redbeat needs Redis for its lock and schedule anyway, and on Redis pgsched's "
        "publish is the same `LPUSH` as a plain beat's (on RabbitMQ pgsched waits for "
        "publisher confirms, which a plain beat does not), so the lags compare like with like.",
    ]


def write_section(doc: Path, beat: dict[str, Any]) -> None:
    """Replace the page's section with ``beat``'s, or put it before ``BEFORE`` (else last)."""
    text = doc.read_text() if doc.exists() else ""
    new = "\n".join(section(beat)) + "\n"
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.rstrip() == HEADING]
    if starts:
        i = starts[0]
        j = next((k for k in range(i + 1, len(lines)) if lines[k].startswith("## ")), len(lines))
        lines[i:j] = [new]
    else:
        at = next((k for k, line in enumerate(lines) if line.rstrip() == BEFORE), len(lines))
        lines[at:at] = [new]
    doc.write_text("".join(lines))


def main(argv: list[str]) -> int:
    path = Path(argv[0]) if argv else BEAT_JSON
    beat = load(path)
    if beat is None:
        print(f"bench.report_beat: no {path}: run python -m bench.beat first", file=sys.stderr)
        return 1
    write_section(DOC, beat)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
