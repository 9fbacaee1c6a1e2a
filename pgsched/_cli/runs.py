"""``pgsched runs ...``: recent executions, filtered, and one execution with every attempt
(``runs show``). Parses arguments and calls ``Admin``, nothing more."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .._operations.requests import RunsQuery, field_names
from .._structures import Attempt, Execution, RunHistory, attempt_text
from .common import admin_from, given, labels, print_table, send, utc_text


def add_runs_command(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``runs [filters]`` and ``runs show EXECUTION_ID`` under ``sub``."""
    p = sub.add_parser("runs", help="recent executions, newest plan first (runs show ID: one)")
    p.add_argument("--job")
    p.add_argument("--status", help="PENDING, RUNNING, SUCCESS, FAILED or CANCELLED")
    p.add_argument("--scope", metavar="KIND:ID", help="only this scope")
    p.add_argument("--since", metavar="TIME", help="plans at or after TIME (ISO 8601; UTC)")
    p.add_argument("--until", metavar="TIME", help="plans before TIME (ISO 8601; UTC)")
    p.add_argument("--limit", type=int, default=20)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(command=_runs)
    actions = p.add_subparsers(metavar="ACTION", parser_class=parser_class)
    show = actions.add_parser("show", help="one execution and every attempt of it")
    show.add_argument("execution_id", metavar="EXECUTION_ID")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(command=_show)


def _runs(args: argparse.Namespace) -> int:
    runs = send(args, RunsQuery.parse(given(args, field_names(RunsQuery)), labels()))
    if args.json:
        print(json.dumps({"runs": [r.to_json() for r in runs]}, indent=2))
        return 0
    headers = ["ID", "JOB", "SCOPE", "PLAN TIME", "TRIGGER", "STATUS", "ATTEMPT", "RUNNER"]
    headers += ["MS", "ERROR"]
    rows = [
        [
            str(r.id),
            r.job,
            str(r.scope)[:40],
            utc_text(r.plan_time),
            r.trigger,
            "STALE" if r.stale else r.status,
            attempt_text(r.attempt, r.max_attempts),
            r.runner_id or "-",
            "-" if r.duration_ms is None else r.duration_ms,
            error_text(r.error_code, r.error_msg),
        ]
        for r in runs
    ]
    print_table(headers, rows)
    return 0


def _show(args: argparse.Namespace) -> int:
    found = admin_from(args).run(args.execution_id)
    if args.json:
        print(json.dumps(found.to_json(), indent=2))
        return 0
    _print_execution(found.execution)
    print()
    _print_attempts(found)
    return 0


def _print_execution(r: Execution) -> None:
    fields = [
        ("id", str(r.id)),
        ("job", r.job),
        ("scope", str(r.scope)),
        ("plan time", utc_text(r.plan_time)),
        ("trigger", r.trigger),
        ("status", "STALE" if r.stale else r.status),
        ("attempt", attempt_text(r.attempt, r.max_attempts)),
        ("next retry", utc_text(r.next_retry_at)),
        ("runner", r.runner_id or "-"),
        ("duration ms", "-" if r.duration_ms is None else str(r.duration_ms)),
        ("error", error_text(r.error_code, r.error_msg, 4000) or "-"),
        # JSON with every non-ASCII and control character escaped: one line, nothing the
        # terminal would act on
        ("result", json.dumps(r.result, sort_keys=True)),
    ]
    if r.payload is not None:  # a dynamic job's run: its schedule's payload
        fields.append(("payload", json.dumps(r.payload, sort_keys=True)))
    for name, value in fields:
        print(f"{name + ':':<13}{value}")


def _print_attempts(found: RunHistory) -> None:
    headers = ["ATTEMPT", "STATUS", "RUNNER", "FENCING", "STARTED", "FINISHED", "ERROR"]
    print_table(headers, [_attempt_row(a) for a in found.attempts])
    for a in found.attempts:
        if a.traceback:
            print(f"\nattempt {a.attempt} traceback:")
            print(a.traceback.rstrip())


def _attempt_row(a: Attempt) -> list[Any]:
    return [
        a.attempt,
        a.status,
        a.runner_id or "-",
        a.fencing_token,
        utc_text(a.started_at),
        utc_text(a.finished_at),
        error_text(a.error_code, a.error_msg, 200) or "-",
    ]


def error_text(code: str | None, message: str | None, width: int = 60) -> str:
    """``code: message`` on one line, cut to ``width`` characters; empty without a code."""
    if not code:
        return ""
    return f"{code}: {' '.join(str(message or '').split())}"[:width]
