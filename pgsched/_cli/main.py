"""The ``pgsched`` command line: parses arguments and calls the library, nothing more."""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

from .._errors import FieldError, PgschedError
from .._jobs.spec import JobSpec
from .._operations.core import DriverError
from .._operations.requests import TriggerRequest, field_names
from .._scheduler import Scheduler
from .._secrets import redact, remember_secrets
from .._structures import Scope, Triggered
from .._telemetry.logs import bound_logger, configure_logging
from .._times import parse_time
from .._version import installed_version
from .app import load_scheduler
from .celery import add_celery_commands
from .common import (
    admin_from,
    cli_field,
    configured_dsn,
    given,
    labels,
    print_table,
    send,
    utc_text,
)
from .explain import add_explain_command
from .replicas import add_replica_commands
from .runs import add_runs_command
from .schedules import add_schedule_commands
from .web import add_web_command


def main(
    argv: Sequence[str] | None = None,
    *,
    scheduler: Scheduler | None = None,
    prog: str = "pgsched",
) -> int:
    """Entry point of the ``pgsched`` console script; returns the exit status.

    Given ``scheduler`` (a framework's, such as ``manage.py pgsched``), the commands take no
    APP and connect to its database and schema unless ``--dsn`` or ``--schema`` say
    otherwise."""
    argv = list(sys.argv[1:] if argv is None else argv)
    for arg in argv:  # before argparse can echo one back in a usage error
        remember_secrets(arg)
    args = _parser(scheduler, prog).parse_args(argv)
    try:
        configure_logging()
        code = int(args.command(args))
        sys.stdout.flush()  # here, so a reader that went away is met inside the try
        return code
    except BrokenPipeError:
        return _reader_gone()
    except FieldError as exc:
        return _fail(exc.worded(cli_field))
    except PgschedError as exc:
        return _fail(str(exc))
    except DriverError as exc:
        return _fail(f"database error: {exc}")
    except OSError as exc:
        return _fail(f"{type(exc).__name__}: {exc}")
    except KeyboardInterrupt:
        return 130


SIGPIPE_STATUS = 141  # 128 + SIGPIPE: what a shell reports for a tool SIGPIPE ended


def _reader_gone() -> int:
    """Standard output's reader closed it (``pgsched runs | head``): stop quietly, as tools
    ended by SIGPIPE do. What is still buffered goes to /dev/null, so the interpreter's last
    flush at exit fails no more (the recipe of Python's ``signal`` documentation)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return SIGPIPE_STATUS


def _fail(message: str) -> int:
    print(f"pgsched: error: {' '.join(redact(message).split())}", file=sys.stderr)
    return 1


class _Parser(argparse.ArgumentParser):
    """argparse, with usage errors as one ``pgsched: error:`` line like every other error,
    passwords redacted."""

    @classmethod
    def with_parents(cls, *parents: argparse.ArgumentParser) -> type[_Parser]:
        """A parser class whose instances (the subcommands) inherit ``parents``' options."""

        class Sub(cls):  # type: ignore[valid-type,misc]
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                kwargs.setdefault("parents", list(parents))
                super().__init__(*args, **kwargs)

        return Sub

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"pgsched: error: {redact(message)} (see '{self.prog} --help')\n")


def _connection_options(parser: argparse.ArgumentParser, schema_default: object) -> None:
    dsn_default = None if schema_default is not argparse.SUPPRESS else argparse.SUPPRESS
    parser.add_argument(
        "--dsn",
        default=dsn_default,
        help="PostgreSQL DSN (default: $PGSCHED_DSN, then $DATABASE_URL)",
    )
    parser.add_argument(
        "--schema",
        default=schema_default,
        help="schema of pgsched's tables (default: $PGSCHED_SCHEMA, then the APP's, then pgsched)",
    )
    parser.add_argument(
        "--transaction-pooling",
        action="store_true",
        default=dsn_default,
        help="connect through a transaction-pooling PgBouncer: no LISTEN, no prepared"
        " statements (default: $PGSCHED_TRANSACTION_POOLING)",
    )


def _parser(scheduler: Scheduler | None = None, prog: str = "pgsched") -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog, description="Periodic jobs across replicas, coordinated by PostgreSQL."
    )
    parser.add_argument("--version", action="version", version=f"pgsched {installed_version()}")
    _connection_options(parser, os.environ.get("PGSCHED_SCHEMA"))
    parser.set_defaults(scheduler=scheduler)
    if scheduler is not None:
        parser.set_defaults(
            dsn=scheduler.dsn,
            schema=scheduler.schema,
            transaction_pooling=scheduler.transaction_pooling or None,
        )
    # --dsn and --schema are accepted after the command too; there they default to "not
    # given", so a value given before the command is kept.
    common = argparse.ArgumentParser(add_help=False)
    _connection_options(common, argparse.SUPPRESS)
    sub = parser.add_subparsers(
        required=True, metavar="COMMAND", parser_class=_Parser.with_parents(common)
    )
    _replica_commands(sub, app=scheduler is None)
    _operator_commands(sub, _Parser.with_parents(common))
    add_schedule_commands(sub, _Parser.with_parents(common))
    add_celery_commands(sub, _Parser.with_parents(common))
    add_replica_commands(sub)
    add_web_command(sub)
    return parser


Subparsers = Any  # argparse's _SubParsersAction, private to argparse


def _app_argument(p: argparse.ArgumentParser, app: bool, help: str | None = None) -> None:
    """APP, unless the command line was given its scheduler."""
    if app:
        p.add_argument("app", metavar="APP", help=help)
    else:
        p.set_defaults(app=None)


def _replica_commands(sub: Subparsers, *, app: bool) -> None:
    """migrate, run, check, backfill: the commands about the schema and an APP's jobs."""
    p = sub.add_parser("migrate", help="create or upgrade pgsched's tables")
    p.set_defaults(command=_migrate)

    p = sub.add_parser("run", help="run the jobs of APP until SIGTERM")
    _app_argument(p, app, help="module[:attr] or path/to/file.py[:attr]")
    p.add_argument("--runner-id", help="this replica's id (default: <hostname>-<pid>)")
    p.add_argument(
        "--http-port",
        type=int,
        default=9464,
        help="port of /metrics, /healthz, /readyz, / and /api/ (default 9464; 0 picks one)",
    )
    p.add_argument("--http-host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--no-http", action="store_true", help="serve no HTTP at all")
    p.add_argument(
        "--migrate",
        action="store_true",
        help="apply migrations before running (always done on the embedded PostgreSQL)",
    )
    p.add_argument(
        "--synchronous-claims",
        action="store_true",
        help="commit claims and terminal writes only once a synchronous standby has them"
        " (default: $PGSCHED_SYNCHRONOUS_CLAIMS)",
    )
    p.set_defaults(command=_run)

    p = sub.add_parser("check", help="validate APP and list its jobs with their next plan times")
    _app_argument(p, app)
    p.add_argument("--count", type=int, default=3, help="plan times to show per job")
    p.set_defaults(command=_check)

    p = sub.add_parser("backfill", help="queue every plan of JOB in [--from, --to]")
    _app_argument(p, app)
    p.add_argument("job", metavar="JOB")
    p.add_argument("--from", dest="start", required=True, metavar="TIME")
    p.add_argument("--to", dest="end", required=True, metavar="TIME")
    p.add_argument("--scope", metavar="KIND:ID", help="default: the job's scopes")
    p.set_defaults(command=_backfill)


def _operator_commands(sub: Subparsers, parser_class: type[argparse.ArgumentParser]) -> None:
    """status, runs, trigger, cancel, pause, resume, prune: no APP needed."""
    p = sub.add_parser("status", help="per job: last plan, status, success, running, stale...")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(command=_status)

    add_runs_command(sub, parser_class)
    add_explain_command(sub)

    p = sub.add_parser("trigger", help="run JOB now (or once --at a time) on some replica")
    p.add_argument("job", metavar="JOB")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--scope", metavar="KIND:ID", help="needed when JOB runs for scopes")
    which.add_argument("--all-scopes", action="store_true", help="one run per scope JOB has")
    p.add_argument("--at", metavar="TIME", help="ISO 8601; without an offset, UTC")
    p.set_defaults(command=_trigger)

    p = sub.add_parser("cancel", help="cancel a PENDING execution")
    p.add_argument("execution_id", metavar="EXECUTION_ID")
    p.set_defaults(command=_cancel)

    p = sub.add_parser("retry", help="retry a FAILED execution now (one more attempt if needed)")
    p.add_argument("execution_id", metavar="EXECUTION_ID")
    p.set_defaults(command=_retry)

    for name, paused in (("pause", True), ("resume", False)):
        p = sub.add_parser(name, help=f"{name} JOB on every replica")
        p.add_argument("job", metavar="JOB")
        p.set_defaults(command=_pause, paused=paused)

    p = sub.add_parser("prune", help="delete finished runs older than --older-than")
    p.add_argument("--older-than", required=True, metavar="DURATION", help="e.g. 30d")
    p.set_defaults(command=_prune)


def _migrate(args: argparse.Namespace) -> int:
    admin = admin_from(args)
    applied = admin.migrate()
    target = f"schema {admin.schema!r}"
    print(f"applied {', '.join(applied)} to {target}" if applied else f"{target} is up to date")
    return 0


class _Terminated(BaseException):
    """SIGTERM or SIGINT arrived while ``run`` was still starting (a BaseException, so an
    APP's ``except Exception`` around its imports cannot swallow it)."""


class _StartGuard:
    """``run``'s signal handling from its first line: before the scheduler is about to run, a
    signal ends the start (exit 0); from then on it asks the scheduler to stop, until the
    scheduler's loop installs handlers of its own."""

    def __init__(self) -> None:
        self.scheduler: Any = None
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: object) -> None:
        # Nothing is logged here: the interrupted code may hold the log's write lock.
        if self.scheduler is None:
            raise _Terminated(signal.Signals(signum).name)
        self.scheduler.stop()


def _run(args: argparse.Namespace) -> int:
    try:
        return _start_and_run(args, _StartGuard())
    except _Terminated as stopped:
        bound_logger().info("shutdown_requested", signal=str(stopped), starting=True)
        return 0


def _start_and_run(args: argparse.Namespace, guard: _StartGuard) -> int:
    scheduler = _loaded(args)
    scheduler.configure(
        dsn=args.dsn,
        schema=args.schema,
        runner_id=args.runner_id,
        transaction_pooling=args.transaction_pooling or None,
        synchronous_claims=args.synchronous_claims or None,
    )
    migrate = args.migrate
    if not scheduler.dsn:
        from .embedded import start_embedded

        dsn, data_dir = start_embedded()
        scheduler.configure(dsn=dsn)
        migrate = True
        print(
            f"pgsched: no DSN configured; started an embedded PostgreSQL in {data_dir} "
            "(set PGSCHED_DSN to use your own database)",
            file=sys.stderr,
        )
    # Where other tools (psql, pgsched status elsewhere) reach this replica's database.
    bound_logger(runner_id=scheduler.runner_id).info("database_dsn", dsn=str(scheduler.dsn))
    if migrate:
        applied = scheduler.migrate()
        if applied:
            print(f"pgsched: applied migrations {', '.join(applied)}", file=sys.stderr)
    if not scheduler.jobs:
        raise _no_jobs(args)
    guard.scheduler = scheduler
    settle_collector()
    scheduler.run(http_port=None if args.no_http else args.http_port, http_host=args.http_host)
    return 0


# The young generation is collected after this many new container objects (Python's
# default: 700). A replica's runs free their objects by reference counting, but at 700 a
# collection traversed what the runs in flight held and promoted it to older generations,
# whose full collections followed (docs/performance.md, "Measured reasons in the code").
# Cyclic garbage waits a little longer.
YOUNG_COLLECTION_EVERY = 10_000


def settle_collector() -> None:
    """Before the loop: what is loaded now (modules, the APP, its jobs) lives as long as the
    process, out of the collector's generations (each full collection scans only what runs
    create), and young objects are collected every :data:`YOUNG_COLLECTION_EVERY`."""
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, *gc.get_threshold()[1:])


def _loaded(args: argparse.Namespace) -> Scheduler:
    """The scheduler the command line was given, else APP's."""
    given_scheduler: Scheduler | None = args.scheduler
    return given_scheduler if given_scheduler is not None else load_scheduler(args.app)


def _no_jobs(args: argparse.Namespace) -> PgschedError:
    return PgschedError(
        f"APP {args.app!r} registers no jobs" if args.app else "the scheduler registers no jobs"
    )


def _check(args: argparse.Namespace) -> int:
    scheduler = _loaded(args)
    jobs = scheduler.jobs
    if not jobs:
        raise _no_jobs(args)
    now = datetime.now(UTC)
    rows = []
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
            p.strftime("%Y-%m-%d %H:%M:%S") for p in spec.recurrence.upcoming(now, args.count)
        )
        rows.append([name, spec.recurrence.describe(), scopes, upcoming or "never"])
    print_table(["JOB", "SCHEDULE", "SCOPES", f"NEXT {args.count} PLAN TIMES (UTC)"], rows)
    for name, spec in sorted(jobs.items()):
        print(f"{name}: after a crash: {_crash_rule(spec)}")
    print(f"{len(jobs)} job(s) OK")
    return 0


def _crash_rule(spec: JobSpec) -> str:
    """What happens to a plan whose replica died while running it (its lease goes stale)."""
    if spec.allow_stale_reentry:
        why = "transactional" if spec.transactional else "allow_stale_reentry=True"
        return f"run again, up to attempt {spec.max_attempts + 1} ({why})"
    return "FAILED stale_timeout, not run again (allow_stale_reentry=False)"


def _status(args: argparse.Namespace) -> int:
    summary = admin_from(args).status()
    if args.json:
        print(json.dumps({"jobs": [j.to_json() for j in summary]}, indent=2))
        return 0
    if not summary:
        print("no jobs registered yet (replicas register their jobs when they start)")
        return 0
    headers = ["JOB", "SCHEDULE", "PAUSED", "NEXT PLAN", "LAST PLAN", "LAST STATUS"]
    headers += ["LAST SUCCESS", "RUNNING", "STALE", "FAILED", "PENDING"]
    rows = [
        [
            j.job,
            j.schedule or "-",
            "yes" if j.paused else "no",
            utc_text(j.next_plan),
            utc_text(j.last_plan),
            j.last_status or "-",
            utc_text(j.last_success),
            j.running,
            j.stale,
            j.failed,
            j.pending,
        ]
        for j in summary
    ]
    print_table(headers, rows)
    return 0


def _trigger(args: argparse.Namespace) -> int:
    fields = given(args, field_names(TriggerRequest))
    done = send(args, TriggerRequest.parse(fields, labels("job")))
    for warning in done[0].warnings if done else ():
        print(f"pgsched: warning: {warning}", file=sys.stderr)
    for row in done:
        print(_triggered_line(row, with_scope=args.all_scopes))
    return 0


def _triggered_line(row: Triggered, *, with_scope: bool) -> str:
    """The execution id (alone for a run this call queued, as scripts read it); for a run it
    did not queue, which execution already holds that plan or run-now, and its status, or
    the scheduled plan that covers the instant asked for."""
    ident = "-" if row.id is None else str(row.id)
    line = f"{ident}  {row.scope}" if with_scope else ident
    if row.created:
        return line
    plan = utc_text(row.plan_time)
    if row.scheduled_plan:
        held = (
            "it has no execution yet" if row.id is None else f"execution {row.id} is {row.status}"
        )
        return (
            f"{line}  not created: {plan} is a scheduled plan of scope {row.scope}, which runs"
            f" anyway ({held})"
        )
    return (
        f"{line}  not created: execution {row.id} already holds scope {row.scope} plan "
        f"{plan} and is {row.status}"
    )


def _cancel(args: argparse.Namespace) -> int:
    admin_from(args).cancel(args.execution_id)
    print(f"cancelled {args.execution_id}")
    return 0


def _retry(args: argparse.Namespace) -> int:
    job = admin_from(args).retry_now(args.execution_id)
    print(f"{args.execution_id} ({job}) is due for a retry now")
    return 0


def _pause(args: argparse.Namespace) -> int:
    admin = admin_from(args)
    (admin.pause if args.paused else admin.resume)(args.job)
    print(f"{'paused' if args.paused else 'resumed'} {args.job}")
    return 0


def _backfill(args: argparse.Namespace) -> int:
    scheduler = _loaded(args)
    scheduler.configure(
        dsn=args.dsn, schema=args.schema, transaction_pooling=args.transaction_pooling or None
    )
    if not scheduler.dsn:
        scheduler.configure(dsn=configured_dsn(None))
    scopes = [Scope.parse(args.scope, args.job)] if args.scope else None
    count = scheduler.backfill(
        args.job, parse_time(args.start, "--from"), parse_time(args.end, "--to"), scopes
    )
    print(f"queued {count} backfill run(s) of {args.job}")
    return 0


def _prune(args: argparse.Namespace) -> int:
    deleted = admin_from(args).prune(args.older_than)
    print(f"deleted {deleted} finished run(s) older than {args.older_than}")
    return 0
