"""The ``pgsched`` command line: parses arguments and calls the library, nothing more."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime

import psycopg

from ._app import load_scheduler
from ._dsn import redact, resolve_dsn
from ._errors import PgschedError
from ._logging import configure_logging
from ._scheduler import Scheduler


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``pgsched`` console script; returns the exit status."""
    args = _parser().parse_args(argv)
    configure_logging()
    try:
        return int(args.command(args))
    except PgschedError as exc:
        return _fail(str(exc))
    except psycopg.Error as exc:
        return _fail(f"database error: {exc}")
    except OSError as exc:
        return _fail(f"{type(exc).__name__}: {exc}")
    except KeyboardInterrupt:
        return 130


def _fail(message: str) -> int:
    print(f"pgsched: error: {' '.join(redact(message).split())}", file=sys.stderr)
    return 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pgsched", description="Periodic jobs across replicas, coordinated by PostgreSQL."
    )
    parser.add_argument("--dsn", help="PostgreSQL DSN (default: $PGSCHED_DSN, then $DATABASE_URL)")
    parser.add_argument(
        "--schema",
        default=os.environ.get("PGSCHED_SCHEMA"),
        help="schema of pgsched's tables (default: $PGSCHED_SCHEMA, then the APP's, then pgsched)",
    )
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    p = sub.add_parser("migrate", help="create or upgrade pgsched's tables")
    p.set_defaults(command=_migrate)

    p = sub.add_parser("run", help="run the jobs of APP until SIGTERM")
    p.add_argument("app", metavar="APP", help="module[:attr] or path/to/file.py[:attr]")
    p.add_argument("--runner-id", help="this replica's id (default: <hostname>-<pid>)")
    p.add_argument(
        "--migrate",
        action="store_true",
        help="apply migrations before running (always done on the embedded PostgreSQL)",
    )
    p.set_defaults(command=_run)

    p = sub.add_parser("check", help="validate APP and list its jobs with their next plan times")
    p.add_argument("app", metavar="APP")
    p.add_argument("--count", type=int, default=3, help="plan times to show per job")
    p.set_defaults(command=_check)
    return parser


def _scheduler_for_db(args: argparse.Namespace) -> Scheduler:
    scheduler = Scheduler(dsn=args.dsn or resolve_dsn(None), schema=args.schema or "pgsched")
    if not scheduler.dsn:
        raise PgschedError("no database configured: pass --dsn, or set PGSCHED_DSN or DATABASE_URL")
    return scheduler


def _migrate(args: argparse.Namespace) -> int:
    scheduler = _scheduler_for_db(args)
    applied = scheduler.migrate()
    target = f"schema {scheduler.schema!r}"
    print(f"applied {', '.join(applied)} to {target}" if applied else f"{target} is up to date")
    return 0


def _run(args: argparse.Namespace) -> int:
    scheduler = load_scheduler(args.app)
    scheduler.configure(dsn=args.dsn, schema=args.schema, runner_id=args.runner_id)
    migrate = args.migrate
    if not scheduler.dsn:
        from ._embedded import start_embedded

        dsn, data_dir = start_embedded()
        scheduler.configure(dsn=dsn)
        migrate = True
        print(
            f"pgsched: no DSN configured; started an embedded PostgreSQL in {data_dir} "
            "(set PGSCHED_DSN to use your own database)",
            file=sys.stderr,
        )
    if migrate:
        applied = scheduler.migrate()
        if applied:
            print(f"pgsched: applied migrations {', '.join(applied)}", file=sys.stderr)
    if not scheduler.jobs:
        raise PgschedError(f"APP {args.app!r} registers no jobs")
    scheduler.run()
    return 0


def _check(args: argparse.Namespace) -> int:
    scheduler = load_scheduler(args.app)
    jobs = scheduler.jobs
    if not jobs:
        raise PgschedError(f"APP {args.app!r} registers no jobs")
    now = datetime.now(UTC)
    rows = [("JOB", "SCHEDULE", "SCOPES", f"NEXT {args.count} PLAN TIMES (UTC)")]
    for name, spec in sorted(jobs.items()):
        scopes = (
            "dynamic"
            if spec.static_scopes is None
            else (
                str(spec.static_scopes[0])
                if len(spec.static_scopes) == 1
                else f"{len(spec.static_scopes)} scopes"
            )
        )
        upcoming = ", ".join(
            p.strftime("%Y-%m-%d %H:%M:%S") for p in spec.schedule.upcoming(now, args.count)
        )
        rows.append((name, spec.schedule.describe(), scopes, upcoming or "never"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)), row[3])
    print(f"{len(jobs)} job(s) OK")
    return 0
