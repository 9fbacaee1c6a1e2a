"""The HA beat workload (``python -m bench.beat``) with tiny numbers, so it cannot rot: 10
entries every 2 s, a 6-s window, pgsched's three beats (one SIGKILLed mid-window) and one
plain beat, on the tests' database and the machine's Redis; no redbeat (its virtualenv is
not installed here). Then the section the docs get from its results."""

from __future__ import annotations

import json
from pathlib import Path

from bench import report_beat
from bench.beat import main
from bench.beat_figures import Window, figures


def test_beat_smoke(pg_dsn: str, tmp_path: Path) -> None:
    argv = [
        "--dsn",
        pg_dsn,
        "--configs",
        "pgsched,beat,beat_grid",
        "--rounds",
        "1",
        "--entries",
        "10",
    ]
    argv += ["--every", "2", "--window", "6", "--warmup", "1", "--drain", "1"]
    argv += ["--results-dir", str(tmp_path), "--no-docs", "--no-install"]
    assert main(argv) == 0
    beat = json.loads((tmp_path / "beat.json").read_text())
    assert set(beat["configs"]) == {"pgsched", "beat", "beat_grid"}
    (only,) = beat["rounds"]
    assert only["order"] == ["pgsched", "beat", "beat_grid"]
    for key, r in only["trials"].items():
        assert r["status"] == "ok", (key, r.get("reason"))
        assert r["expected"] == 30, key  # 10 entries x 3 slots of 2 s
        assert r["published"] > 0 and r["lag_p99_s"] is not None, (key, r)
        assert r["lost"] == r["expected"] - r["published"], key
    mine = only["trials"]["pgsched"]
    assert mine["duplicated"] == 0, mine
    assert mine["killed_beat"] in (0, 1, 2) and mine["kill_after_s"] is not None, mine
    assert only["trials"]["beat"]["killed_origin"] is None  # one beat: nobody killed
    assert beat["median"]["pgsched"]["published"] == mine["published"]
    page = "\n".join(report_beat.section(beat))
    assert page.startswith(report_beat.HEADING)
    assert "pgsched: 0 duplicates and 0 lost plans" in page


def test_plain_beats_grid_counts_a_second_beat_as_duplicates_and_a_gap_as_lost() -> None:
    """Two beats 0.3 s apart on a 5-s entry: each plan twice; then one beat, silent for
    three plans: lost after the kill, not before."""
    arrivals = []
    for k in range(12):
        at = 100.0 + 5 * k + 0.01 * k  # the drift a plain beat adds send after send
        if k < 6 or k >= 9:
            arrivals.append({"t": at, "entry": "e0", "origin": "a", "task_id": f"a{k}"})
        if k < 4:
            arrivals.append({"t": at + 0.3, "entry": "e0", "origin": "b", "task_id": f"b{k}"})
    w = Window("plain", ["e0"], 5, start=100.0, length_s=60.0, kill_t=120.0 + 0.5)
    got = figures(arrivals, w)
    assert got["expected"] == 12 and got["published"] == 9 and got["lost"] == 3
    assert got["duplicated"] == 4 and got["duplicated_a_cadence_before_kill"] == 4
    assert got["published_a_cadence_before_kill"] == 4  # the plans due before 115.5
    assert got["duplicated_new_task_id"] == 4
    assert got["lost_before_kill"] == 0 and got["lost_after_kill"] == 3
    assert got["lag_max_s"] == 0.11 and got["longest_silence_s"] > 19


def test_a_plain_beat_on_the_grid_counts_its_lag_from_the_plans_time() -> None:
    """Entries on the epoch grid: a message 0.2 s after a multiple of the cadence lags 0.2 s
    (an interval entry's first send would set its grid and count none of it)."""
    arrivals = [
        {"t": 100.0 + 5 * k + 0.2, "entry": "e0", "origin": "a", "task_id": f"a{k}"}
        for k in range(12)
    ]
    on_grid = figures(arrivals, Window("grid", ["e0"], 5, start=100.0, length_s=60.0, kill_t=None))
    assert on_grid["published"] == 12 and on_grid["lost"] == 0
    assert on_grid["lag_p50_s"] == 0.2 and on_grid["lag_max_s"] == 0.2
    drift = figures(arrivals, Window("plain", ["e0"], 5, start=100.0, length_s=60.0, kill_t=None))
    assert drift["lag_max_s"] == 0.0


def test_the_grid_schedule_is_due_once_per_multiple_of_its_cadence() -> None:
    from datetime import UTC, datetime, timedelta

    from bench.peers.beat_app import on_grid

    now = datetime.fromtimestamp(1_000_002.0, UTC)  # 2 s past a multiple of 5 s
    every = on_grid(timedelta(seconds=5), nowfun=lambda: now)
    assert every.is_due(datetime.fromtimestamp(999_999.0, UTC)) == (True, 3.0)
    assert every.is_due(datetime.fromtimestamp(1_000_000.5, UTC)) == (False, 3.0)
