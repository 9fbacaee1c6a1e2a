"""``python -m bench.beat``: the workload "beat", pgsched's HA Celery beat against plain
Celery beat and celery-redbeat.

The same ``beat_schedule`` (``--entries`` entries, each every ``--every`` seconds) is sent by
each configuration of bench/beat_trial.py in turn: pgsched (three ``celery beat -S pgsched``
on one PostgreSQL: the bench's private cluster, or a database of its own on ``--dsn``), one
plain ``celery beat``, two plain beats, and three celery-redbeat beats (pinned in
bench/requirements-peers.txt, run from the peers' virtualenv). A consumer reads every message
from the configuration's queue on the machine's Redis; where there is more than one beat, one
is SIGKILLed ``--kill-at`` seconds into the ``--window``. Each round runs every configuration
once, each round starting one configuration further on; the figures
(bench/beat_figures.py) of every round and their median go to bench/results/beat.json
(overwritten) and, unless ``--no-docs``, to the "HA Celery beat" section of
docs/performance.md (bench/report_beat.py).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import measure, pg, report_beat, rounds
from bench.beat_figures import median_of
from bench.beat_trial import BeatTrial, Shape
from bench.registry import CONFIGS
from bench.shared import RESULTS, log, peers_python

REDIS = "redis://127.0.0.1:6379/13"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.beat", description=__doc__.split("\n")[0])
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"default: {','.join(CONFIGS)}")
    p.add_argument("--rounds", type=int, default=3, help="every configuration once a round")
    p.add_argument("--entries", type=int, default=200)
    p.add_argument("--every", type=int, default=5, help="each entry's cadence (s)")
    p.add_argument("--window", type=float, default=60.0, help="the measured window (s)")
    p.add_argument("--kill-at", type=float, help="when a beat is killed, from the window's start")
    p.add_argument("--warmup", type=float, default=5.0, help="after every beat's first send (s)")
    p.add_argument("--drain", type=float, default=5.0, help="after the window (s)")
    p.add_argument("--dsn", help="use this server instead of starting a private one")
    p.add_argument("--redis", default=REDIS, help=f"the broker (default {REDIS})")
    p.add_argument("--results-dir", default=str(RESULTS), help="beat.json goes here")
    p.add_argument("--work-dir", help="the beats' logs and arrivals (default: a temp dir)")
    p.add_argument("--keep-work", action="store_true", help="keep the beats' logs and arrivals")
    p.add_argument("--no-install", action="store_true", help="never create the peers' venv")
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/performance.md")
    return p


def options(argv: list[str] | None) -> tuple[argparse.Namespace, Shape, list[str]]:
    """The arguments, the workload's shape and the configurations, or one line on stderr."""
    cli = parser()
    args = cli.parse_args(argv)
    keys = [k for k in args.configs.split(",") if k]
    unknown = [k for k in keys if k not in CONFIGS]
    if unknown or not keys:
        cli.error(f"--configs {args.configs!r}: known are {', '.join(CONFIGS)}")
    if args.rounds < 1 or args.entries < 1 or args.every < 1 or args.window <= 0:
        cli.error("--rounds, --entries, --every and --window must be positive")
    kill_at = args.window / 2 if args.kill_at is None else args.kill_at
    if not 0 < kill_at < args.window:
        cli.error(f"--kill-at {kill_at:g}: inside the window (0-{args.window:g} s)")
    shape = Shape(
        entries=args.entries,
        every_s=args.every,
        window_s=args.window,
        kill_at_s=kill_at,
        warmup_s=args.warmup,
        drain_s=args.drain,
        redbeat_max_loop_s=float(args.every),
    )
    return args, shape, keys


def interpreters(keys: list[str], install: bool) -> dict[str, tuple[str | None, str]]:
    """Each configuration's Python, or why there is none."""
    out: dict[str, tuple[str | None, str]] = {}
    for key in keys:
        out[key] = peers_python(install) if CONFIGS[key].venv == "peers" else (sys.executable, "")
    return out


def new_report(
    args: argparse.Namespace, shape: Shape, keys: list[str], server: pg.Server | None
) -> dict[str, Any]:
    return {
        "started": datetime.now(UTC).isoformat(),
        "command": " ".join(["python -m bench.beat", *sys.argv[1:]]),
        "machine": measure.machine(),
        "postgres": {
            "version": server.version if server else None,
            "where": "given by --dsn" if args.dsn else "private cluster",
        },
        "broker": args.redis,
        "shape": asdict(shape),
        "configs": {k: asdict(CONFIGS[k]) for k in keys},
        "loadavg_start": measure.loadavg(),
        "rounds": [],
    }


def run_trial(
    key: str, shape: Shape, python: tuple[str | None, str], **where: Any
) -> dict[str, Any]:
    """One configuration's trial, or why it did not run."""
    if python[0] is None:
        return {"status": "not run", "reason": python[1]}
    log(f"beat: {key} ({CONFIGS[key].label}), load {measure.loadavg()}")
    trial = BeatTrial(CONFIGS[key], shape, python[0], **where)
    try:
        return trial.execute()
    except Exception as exc:
        return {"status": "not run", "reason": f"{type(exc).__name__}: {exc}"[:400]}
    finally:
        trial.close()


def summary(key: str, r: dict[str, Any]) -> str:
    if r.get("status") != "ok":
        return f"  {key}: {r.get('status')} {r.get('reason', '')}"
    return (
        f"  {key}: published {r['published']} of {r['expected']}, duplicated "
        f"{r['duplicated']}, lost {r['lost']} (after the kill {r['lost_after_kill']}), lag "
        f"p50/p99/max {r['lag_p50_s']}/{r['lag_p99_s']}/{r['lag_max_s']} s, longest silence "
        f"{r['longest_silence_s']} s, killed {r.get('killed_origin')}"
    )


def run(args: argparse.Namespace, shape: Shape, keys: list[str]) -> dict[str, Any]:
    pythons = interpreters(keys, install=not args.no_install)
    server = None
    if "pgsched" in keys:
        server = pg.external(args.dsn) if args.dsn else pg.start_private()
    out = Path(args.results_dir) / "beat.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    run_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="pgsched-bench-beat-"))
    result = new_report(args, shape, keys, server)
    where = {"server": server, "broker": args.redis, "run_dir": run_dir}
    try:
        for round_no in range(args.rounds):
            order = rounds.rotated(keys, round_no)
            trials: dict[str, Any] = {}
            result["rounds"].append({"round": round_no, "order": order, "trials": trials})
            for key in order:
                trials[key] = run_trial(key, shape, pythons[key], **where)
                log(summary(key, trials[key]))
                out.write_text(json.dumps(result, indent=1))
    finally:
        if server is not None:
            server.stop()
    result["median"] = {k: median_of([r["trials"][k] for r in result["rounds"]]) for k in keys}
    result["goals"] = [list(g) for g in report_beat.goals(result)]
    result["finished"] = datetime.now(UTC).isoformat()
    result["loadavg_end"] = measure.loadavg()
    out.write_text(json.dumps(result, indent=1))
    if not args.keep_work and not args.work_dir:
        shutil.rmtree(run_dir, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    args, shape, keys = options(argv)
    started = time.monotonic()
    result = run(args, shape, keys)
    for goal, ok, evidence in result["goals"]:
        mark = "met" if ok else "NOT MET" if ok is False else "not measured"
        log(f"goal {mark}: {goal}: {evidence}")
    if not args.no_docs:
        report_beat.write_section(report_beat.DOC, result)
    took = time.monotonic() - started
    log(f"beat: done in {took:.0f} s, results in {args.results_dir}/beat.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
