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
import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import REPO, measure, pg, report_dynamic, rounds
from bench.dynamic_schedulers import DYNAMIC
from bench.dynamic_trial import DynamicTrial
from bench.schedulers import CEILINGS, ORDER, REGISTRY
from bench.trial import Options, Trial
from bench.workloads import WORKLOADS, Workload

RESULTS = REPO / "bench" / "results"
PEERS_VENV = REPO / "bench" / ".venv-peers"
PEERS_REQUIREMENTS = REPO / "bench" / "requirements-peers.txt"
# oban-py needs Python 3.12 or later, which the project does not: it gets a virtualenv of its
# own, made with the first such interpreter found (BENCH_PYTHON312, then python3.13 or
# python3.12 on PATH, then pyenv's).
OBAN_VENV = REPO / "bench" / ".venv-oban"
OBAN_REQUIREMENTS = REPO / "bench" / "requirements-oban.txt"
OBAN_MIN_PYTHON = (3, 12)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def peers_python(install: bool) -> tuple[str | None, str]:
    """The peers' virtualenv interpreter (created from the pinned requirements), or why not."""
    return venv_python(PEERS_VENV, PEERS_REQUIREMENTS, sys.executable, install)


def oban_python(install: bool) -> tuple[str | None, str]:
    """oban's virtualenv interpreter, or why not."""
    base = python_at_least(OBAN_MIN_PYTHON)
    if base is None:
        version = ".".join(map(str, OBAN_MIN_PYTHON))
        return None, f"oban-py needs Python >= {version} and none was found"
    return venv_python(OBAN_VENV, OBAN_REQUIREMENTS, base, install)


def python_at_least(version: tuple[int, int]) -> str | None:
    """An interpreter of ``version`` or later, or None."""
    candidates = [os.environ.get("BENCH_PYTHON312", ""), sys.executable]
    candidates += [shutil.which(f"python3.{minor}") or "" for minor in (14, 13, 12)]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python")))
    wanted = f"import sys; sys.exit(sys.version_info < {version!r})"
    for python in filter(None, candidates):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run([python, "-c", wanted], capture_output=True, timeout=30)
            if done.returncode == 0:
                return python
    return None


def venv_python(venv: Path, requirements: Path, base: str, install: bool) -> tuple[str | None, str]:
    """``venv``'s interpreter, the virtualenv created by ``base`` from the pinned
    ``requirements`` when missing or stale, or why not."""
    python = venv / "bin" / "python"
    marker = venv / ".requirements"
    wanted = requirements.read_text()
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return str(python), ""
    if not install:
        return None, f"the virtualenv {venv.name} is missing and --no-install was given"
    log(f"creating the virtualenv {venv} from {requirements.name}")
    try:
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "-r", str(requirements)],
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return None, f"could not install the pinned peers: {detail.strip()[-300:]}"
    marker.write_text(wanted)
    return str(python), ""


VENVS = {"peers": peers_python, "oban": oban_python}


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


ALL_KEYS = (*ORDER, *(k for k in DYNAMIC if k not in REGISTRY))


def selected_schedulers(args: argparse.Namespace) -> list[str]:
    keys = [s for s in args.schedulers.split(",") if s]
    unknown = [k for k in keys if k not in REGISTRY and k not in DYNAMIC]
    if unknown:
        raise SystemExit(f"unknown schedulers {unknown}; known: {', '.join(ALL_KEYS)}")
    return keys


def contender_for(wl: Workload, key: str) -> Any:
    """The contender ``key`` of ``wl``'s kind (schedules as data or not), or None: a
    scheduler without schedules as data does not appear in workloads g-i, nor the peers
    with only schedules as data in a-f. The limits also run h (10,000 plans due at one
    minute is the shape of c), as scopes of a code-defined cadence, so pgsched's dynamic claims
    get ratios to them from the same run."""
    if wl.schedules == "due" and key in CEILINGS:
        return REGISTRY[key]
    return (DYNAMIC if wl.schedules else REGISTRY).get(key)


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
        name: VENVS[name](install=not args.no_install)
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
    base = {"workload": wl.key, "scheduler": key}
    why = contender.unsupported(wl)
    if why:
        return {**base, "status": "not run", "reason": why}
    python, why_not = sys.executable, ""
    if contender.third_party:
        python, why_not = venvs.get(getattr(contender, "venv", "peers"), (None, "no virtualenv"))
    if python is None:
        return {**base, "status": "not run", "reason": why_not}
    log(f"workload {wl.key} ({wl.title}): {key}, load {measure.loadavg()}")
    if wl.schedules and key not in CEILINGS:
        trial: Trial = DynamicTrial(server, wl, contender, opts, python, run_dir)
    else:
        trial = Trial(server, wl, contender, opts, python, run_dir)
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
        from bench import report as report_mod

        report_mod.write_docs(
            report, peers_python(install=False)[0], Path(args.results_dir) / "latest.json"
        )
    return 0
