"""What a calendar costs the planning of a job: ``python -m bench.calendars [--rounds N]``.

Times ``upcoming()`` (the next 100 plans, what ``pgsched check``, the dashboard's upcoming
plans and the replicas' registration ask for) of one job with a calendar against the same job
without one, in the same process and round, so the ratio does not depend on the machine. The
calendars are built once, as a job builds its own; their holiday years are read by the first
call, which is timed apart (``first_call_ms``). No database. Results go to
bench/results/calendars.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import holidays

import pgsched

OUT = Path(__file__).parent / "results" / "calendars.json"
COUNT = 100  # plans asked for
REPEATS = 200  # calls per timing
AFTER = datetime(2027, 1, 4, 12, 0, tzinfo=UTC)


def _bavaria() -> pgsched.Calendar:
    return pgsched.Calendar(
        holidays=holidays.country_holidays("DE", subdiv="BY"),
        exclude=[(date(2027, 12, 24), date(2027, 12, 31))],
    )


def _cases() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each case: the job without a calendar, and with one (its options)."""
    daily = {"cron": "0 9 * * *", "timezone": "Europe/Berlin"}
    minutely = {"cron": "*/5 * * * *", "timezone": "Europe/Berlin"}
    return {
        "daily 09:00, skip": (daily, {**daily, "calendar": _bavaria()}),
        "daily 09:00, next_working_day": (
            daily,
            {**daily, "calendar": _bavaria(), "on_excluded": "next_working_day"},
        ),
        "every 5 minutes, skip": (minutely, {**minutely, "calendar": _bavaria()}),
        "every 5 minutes, next_working_day": (
            minutely,
            {**minutely, "calendar": _bavaria(), "on_excluded": "next_working_day"},
        ),
        # What cron cannot say, against cron's nearest: the 1st of each month at 18:00.
        "last working day 18:00": (
            {"cron": "0 18 1 * *", "timezone": "Europe/Berlin"},
            {"planner": pgsched.working_day(-1, "18:00", _bavaria()), "timezone": "Europe/Berlin"},
        ),
    }


def _timed(call: Callable[[], object]) -> float:
    """Microseconds per call: the best of five runs of :data:`REPEATS` calls."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(REPEATS):
            call()
        best = min(best, (time.perf_counter() - started) / REPEATS)
    return best * 1e6


def measure_round() -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, (plain, calendared) in _cases().items():
        scheduler = pgsched.Scheduler(dsn="postgresql://unused")  # upcoming() reads no database
        scheduler.register(lambda run: None, name="plain", **plain)
        scheduler.register(lambda run: None, name="calendar", **calendared)
        started = time.perf_counter()
        scheduler.upcoming("calendar", AFTER, COUNT)  # reads the holiday years it touches
        first = (time.perf_counter() - started) * 1e3
        base_us = _timed(lambda s=scheduler: s.upcoming("plain", AFTER, COUNT))  # type: ignore[misc]
        cal_us = _timed(lambda s=scheduler: s.upcoming("calendar", AFTER, COUNT))  # type: ignore[misc]
        out[name] = {
            "without_us": round(base_us, 1),
            "with_us": round(cal_us, 1),
            "ratio": round(cal_us / base_us, 2),
            "first_call_ms": round(first, 2),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.calendars")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    rounds = []
    for i in range(args.rounds):
        result = measure_round()
        rounds.append(result)
        for name, figures in result.items():
            print(f"round {i + 1}  {name:32} {json.dumps(figures)}")
    worst = {name: max(r[name]["ratio"] for r in rounds) for name in rounds[0]}
    median = {name: statistics.median(r[name]["ratio"] for r in rounds) for name in rounds[0]}
    print(f"worst ratio per case: {json.dumps(worst)}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(
        json.dumps({"count": COUNT, "rounds": rounds, "median": median, "worst": worst}, indent=2)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
