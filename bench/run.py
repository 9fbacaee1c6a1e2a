"""``python -m bench``: pgsched side by side with its peers and the physical limits.

For every workload and every scheduler it creates a fresh database, starts N replica
processes, lets them run for whole periods, and reads the results from the ledger every
handler writes to (plans due and completed, duplicates, start lag), from pg_stat_statements
(statements and database time; counted by the clients when the server lacks it) and from
/proc (CPU seconds and peak RSS per replica). Results go to ``bench/results/`` as JSON and,
unless ``--no-docs``, into ``docs/performance.md`` and ``docs/performance.png``.

The compared schedulers are in :mod:`bench.schedulers`, the workloads and their timelines in
:mod:`bench.workloads` and :mod:`bench.timeline`, one trial in :mod:`bench.trial`, what is
measured in :mod:`bench.measure`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import measure, pg, report_dynamic, rounds
from bench.dynamic_trial import DynamicTrial
from bench.registry import ALL_KEYS, CEILINGS, DYNAMIC, REGISTRY, WORKLOADS, contender_for
from bench.report import write_docs
from bench.shared import RESULTS, VENVS, log, peers_python
from bench.trial import Options, Trial
from bench.workloads import Workload

# -- the benchmark --------------------------------------------------------------------------


def selected_workloads(args: argparse.Namespace) -> list[Workload]:
    overrides = {
        k: v
        for k, v in (
            ("scopes", args.scopes),
            ("every_s", args.every),
            ("periods", args.periods),
            ("window_s", args.window),
            ("churn_per_s", args.churn_per_s),
            ("overlap", args.overlap),
        )
        if v is not None
    }
    return [replace(WORKLOADS[k], **overrides) for k in args.workloads.split(",")]


def selected_schedulers(args: argparse.Namespace) -> list[str]:
    keys = [s for s in args.schedulers.split(",") if s]
    unknown = [k for k in keys if k not in REGISTRY and k not in DYNAMIC]
    if unknown:
        raise SystemExit(f"unknown schedulers {unknown}; known: {', '.join(ALL_KEYS)}")
    return keys


def needed_venvs(workloads: list[Workload], schedulers: list[str]) -> set[str]:
    """The virtualenvs (keys of VENVS) the third-party contenders to run need."""
    return {
        getattr(c, "venv", "peers")
        for wl in workloads
        for c in (contender_for(wl, k) for k in schedulers)
        if c is not None and c.third_party and c.unsupported(wl) is None
    }


def new_report(
    server: pg.Server, args: argparse.Namespace, opts: Options, workloads: list[Workload]
) -> dict[str, Any]:
    return {
        "started": datetime.now(UTC).isoformat(),
        "command": " ".join(["python -m bench", *sys.argv[1:]]),
        "machine": measure.machine(),
        "postgres": {
            "version": server.version,
            "where": "private" if not args.dsn else "given by --dsn",
            "pg_stat_statements": server.has_pgss,
        },
        "options": asdict(opts),
        "workloads": {w.key: asdict(w) for w in workloads},
        "loadavg_start": measure.loadavg(),
        "results": [],
    }


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    workloads = selected_workloads(args)
    schedulers = selected_schedulers(args)
    opts = Options(
        replicas=args.replicas,
        concurrency=args.concurrency,
        warmup_s=args.warmup,
        keep_databases=args.keep_databases,
        put_cap_s=args.put_cap,
    )
    venvs = {
        name: VENVS[name](not args.no_install)
        for name in sorted(needed_venvs(workloads, schedulers))
    }
    server = pg.external(args.dsn) if args.dsn else pg.start_private()
    log(f"PostgreSQL {server.version}: {server.description}; pg_stat_statements={server.has_pgss}")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    results_dir = Path(args.results_dir)
    results_dir.mkdir(parents=True, exist_ok=True)
    run_dir = Path(args.work_dir or tempfile.mkdtemp(prefix="pgsched-bench-"))
    report = new_report(server, args, opts, workloads)
    trials: list[dict[str, Any]] = []
    report["results"] = trials  # as the trials come, for latest.json
    try:
        for wl in workloads:
            for round_no in range(args.rounds):
                for key in rounds.order(schedulers, round_no):
                    if contender_for(wl, key) is None:
                        continue
                    res = run_one(server, wl, key, opts, venvs, run_dir)
                    trials.append({**res, "round": round_no} if args.rounds > 1 else res)
                    log(summary_line(res))
                    (results_dir / "latest.json").write_text(json.dumps(report, indent=1))
    finally:
        server.stop()
    if args.rounds > 1:
        report["trials"] = trials
        report["results"] = rounds.settle(trials)
        for r in report["results"]:
            if "rounds" in r:
                log(f"  {r['workload']}/pgsched, round by round: {r['rounds']}")
    else:
        measure.add_ratios(report["results"])
    for line in ratio_lines(report["results"]):
        log(line)
    report["finished"] = datetime.now(UTC).isoformat()
    report["loadavg_end"] = measure.loadavg()
    (results_dir / f"results-{stamp}.json").write_text(json.dumps(report, indent=1))
    if args.merge:  # this run's results replace the earlier file's for the same pairs
        report = report_dynamic.merge([json.loads(Path(args.merge).read_text()), report])
    (results_dir / "latest.json").write_text(json.dumps(report, indent=1))
    if not args.keep_work and not args.work_dir:
        shutil.rmtree(run_dir, ignore_errors=True)
    return report


def run_one(
    server: pg.Server,
    wl: Workload,
    key: str,
    opts: Options,
    venvs: dict[str, tuple[str | None, str]],
    run_dir: Path,
) -> dict[str, Any]:
    """One trial's result, or why it was not run."""
    contender = contender_for(wl, key)
    assert contender is not None  # run_benchmark passes only the workload's contenders
    base = {"workload": wl.key, "scheduler": key}
    why = contender.unsupported(wl)
    if why:
        return {**base, "status": "not run", "reason": why}
    python: str | None = sys.executable
    why_not = ""
    if contender.third_party:
        python, why_not = venvs.get(getattr(contender, "venv", "peers"), (None, "no virtualenv"))
    if python is None:
        return {**base, "status": "not run", "reason": why_not}
    log(f"workload {wl.key} ({wl.title}): {key}, load {measure.loadavg()}")
    if wl.schedules and key not in CEILINGS:
        trial: Trial = DynamicTrial(server, wl, DYNAMIC[key], opts, python, run_dir)
    else:
        trial = Trial(server, wl, REGISTRY[key], opts, python, run_dir)
    try:
        return trial.execute()
    except Exception as exc:
        return {**base, "status": "not run", "reason": f"{type(exc).__name__}: {exc}"[:400]}
    finally:
        trial.close()


def summary_line(r: dict[str, Any]) -> str:
    if r.get("status") != "ok":
        return f"  {r['workload']}/{r['scheduler']}: {r.get('status')} {r.get('reason', '')}"
    dynamic = ""
    if "put_per_s" in r:
        dynamic = (
            f" | {r['schedules']} schedules, put {r['put_schedules']} at {r['put_per_s']}/s"
            f"{' (' + r['size_note'] + ')' if r.get('size_note') else ''}"
        )
    if "stale_claims" in r:
        dynamic += (
            f", churn {r['churn_ops_per_s']} ops/s, stale {r['stale_claims']}, missed "
            f"{r['churn_missed']} of {r['churn_due']}, lag p99 {r['churn_lag_p99_s']} s"
        )
    return (
        f"  {r['workload']}/{r['scheduler']}: due {r['due']} completed {r['completed']} "
        f"({r['completion_pct']}%) dups {r['duplicates']} lag p50/p99/max "
        f"{r['lag_p50_s']}/{r['lag_p99_s']}/{r['lag_max_s']} s {r['plans_per_s']} plans/s "
        f"(peak {r['peak_per_s']}/s) "
        f"stmts/tick {r.get('statements_per_tick')} db ms/tick {r.get('db_ms_per_tick')} "
        f"cpu {r['cpu_s']} rss {r['peak_rss_mb']}{dynamic}"
    )


def ratio_lines(results: list[dict[str, Any]]) -> list[str]:
    """pgsched's plans/s and fan-out time against each limit's, one line per workload."""
    limits = {(r["workload"], r["scheduler"]): r for r in results if r["scheduler"] in CEILINGS}
    lines = []
    for r in results:
        if r["scheduler"] != "pgsched" or r.get("status") != "ok":
            continue
        rates, fanouts = [], []
        for key, suffix in CEILINGS.items():
            limit = limits.get((r["workload"], key), {})
            rates.append(f"{r.get(f'ratio_to_{suffix}')} × {key} ({limit.get('plans_per_s')})")
            fanouts.append(f"{r.get(f'fanout_to_{suffix}')} × {key} ({limit.get('fanout_s')} s)")
        lines.append(
            f"  {r['workload']}/pgsched: {r['plans_per_s']} plans/s = {', '.join(rates)}; "
            f"fan-out {r.get('fanout_s')} s = {', '.join(fanouts)}"
        )
    return lines


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    p.add_argument("--workloads", default=",".join(WORKLOADS), help="default: a,b,c,d,e,f,g,h,i")
    p.add_argument(
        "--schedulers", default=",".join(ALL_KEYS), help=f"default: {','.join(ALL_KEYS)}"
    )
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=2000, help="handler slots per replica")
    p.add_argument("--warmup", type=float, default=8.0, help="seconds before measuring")
    p.add_argument("--scopes", type=int, help="override every workload's scope count")
    p.add_argument("--every", type=int, help="override every workload's cadence (s)")
    p.add_argument("--periods", type=int, help="override the periods measured")
    p.add_argument("--window", type=int, help="override the idle / catch-up window (s)")
    p.add_argument("--churn-per-s", type=int, help="override the churn's operations/s (i)")
    p.add_argument(
        "--overlap",
        choices=("forbid", "allow"),
        help="override the overlap rule of pgsched's code-defined job (a-f; e: allow)",
    )
    p.add_argument(
        "--put-cap", type=float, default=600.0, help="longest bulk put of schedules (s), g"
    )
    p.add_argument("--dsn", help="use this server instead of starting a private one")
    p.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run each workload's schedulers this many times, alternating their order; the "
        "round with pgsched's median fan-out ratio stands for the workload (bench/rounds.py)",
    )
    p.add_argument("--results-dir", default=str(RESULTS))
    p.add_argument("--work-dir", help="replica logs and counters (default: a temp dir)")
    p.add_argument("--keep-work", action="store_true", help="keep replica logs")
    p.add_argument("--keep-databases", action="store_true")
    p.add_argument("--no-install", action="store_true", help="never create the peers' venv")
    p.add_argument("--no-docs", action="store_true", help="do not rewrite docs/performance.*")
    p.add_argument(
        "--merge",
        metavar="RESULTS.json",
        help="add this run's results to an earlier run's (latest.json and the docs)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    cli = parser()
    args = cli.parse_args(argv)
    if args.rounds < 1:
        cli.error(f"--rounds {args.rounds}: at least 1")
    report = run_benchmark(args)
    if not args.no_docs:
        write_docs(report, peers_python(install=False)[0], Path(args.results_dir) / "latest.json")
    return 0
