"""``pgsched schedules ...``: the schedules of a dynamic job (docs/schedules.md) from the
command line. Parses arguments and calls ``Admin``, nothing more."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .._errors import NotFoundError
from .._operations.requests import ScheduleRequest, field_names
from .._structures import Schedule, Scope
from .._times import format_duration
from .app import load_scheduler
from .common import admin_from, given, labels, print_table, send, utc_text


def add_schedule_commands(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``schedules list|get|put|delete|pause|resume`` under ``sub``."""
    top = sub.add_parser("schedules", help="the schedules of a dynamic job")
    commands = top.add_subparsers(required=True, metavar="ACTION", parser_class=parser_class)

    p = commands.add_parser("list", help="schedules of JOB by scope, a page at a time")
    p.add_argument("job", metavar="JOB")
    p.add_argument("--after", metavar="KIND:ID", help="start after this scope (keyset page)")
    p.add_argument("--limit", type=int, default=100, help="at most this many (1 to 1000)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(command=_list)

    p = commands.add_parser("get", help="one schedule")
    _target(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(command=_get)

    p = commands.add_parser("put", help="create or replace one schedule")
    _target(p)
    spec = p.add_mutually_exclusive_group(required=True)
    spec.add_argument("--cron", metavar="EXPR", help="5-field cron, read in --timezone")
    spec.add_argument("--every", metavar="DURATION", help="fixed cadence, e.g. 15m")
    p.add_argument("--timezone", default="UTC", metavar="TZ", help="IANA zone (default UTC)")
    p.add_argument("--payload", metavar="JSON", help="a JSON object, given to every run")
    p.add_argument("--starts-at", metavar="TIME", help="no plan before (ISO 8601)")
    p.add_argument("--ends-at", metavar="TIME", help="no plan at or after (ISO 8601)")
    p.add_argument("--paused", action="store_true", help="put it paused")
    p.add_argument("--calendar", metavar="NAME", help="a calendar the scheduler names")
    p.add_argument(
        "--on-excluded",
        choices=("skip", "next_working_day", "previous_working_day"),
        help="a plan on a day the calendar excludes (default skip)",
    )
    p.add_argument(
        "--app", metavar="APP", help="the config module whose scheduler names --calendar"
    )
    p.set_defaults(command=_put)

    for name, action in (("delete", _delete), ("pause", _pause), ("resume", _resume)):
        p = commands.add_parser(name, help=f"{name} one schedule")
        _target(p)
        p.set_defaults(command=action)


def _target(p: argparse.ArgumentParser) -> None:
    p.add_argument("job", metavar="JOB")
    p.add_argument("scope", metavar="KIND:ID")


def _list(args: argparse.Namespace) -> int:
    after = Scope.parse(args.after) if args.after else None
    page = admin_from(args).list_schedules(args.job, after=after, limit=args.limit)
    if args.json:
        print(json.dumps({"schedules": [s.to_json() for s in page]}, indent=2))
        return 0
    rows = [
        [
            str(s.scope),
            _spec(s),
            "yes" if s.paused else "no",
            utc_text(s.next_plan_time),
            json.dumps(s.payload)[:40],
        ]
        for s in page
    ]
    print_table(["SCOPE", "SCHEDULE", "PAUSED", "NEXT PLAN (UTC)", "PAYLOAD"], rows)
    return 0


def _get(args: argparse.Namespace) -> int:
    scope = Scope.parse(args.scope, args.job)
    found = admin_from(args).get_schedule(args.job, scope)
    if found is None:
        raise NotFoundError(f"job {args.job!r}, scope {scope}: no such schedule")
    if args.json:
        print(json.dumps(found.to_json(), indent=2))
        return 0
    for key, value in found.to_json().items():
        shown = value if key != "scope" else str(found.scope)
        if key == "every" and found.every is not None:  # the JSON's seconds, as written in input
            shown = format_duration(found.every)
        print(f"{key}: {json.dumps(shown) if isinstance(shown, dict) else shown}")
    return 0


def _put(args: argparse.Namespace) -> int:
    if args.app and getattr(args, "scheduler", None) is None:
        args.scheduler = load_scheduler(args.app)  # its jobs, and the calendars they name
    fields = given(args, field_names(ScheduleRequest))
    request = ScheduleRequest.parse(fields, labels("job", "scope"))
    put = send(args, request)
    scope = request.spec.scope
    print(f"put {args.job} {scope}: {_spec(put)}, next plan {utc_text(put.next_plan_time)} UTC")
    return 0


def _delete(args: argparse.Namespace) -> int:
    scope = Scope.parse(args.scope, args.job)
    if not admin_from(args).delete_schedule(args.job, scope):
        raise NotFoundError(f"job {args.job!r}, scope {scope}: no such schedule")
    print(f"deleted {args.job} {scope}")
    return 0


def _pause(args: argparse.Namespace) -> int:
    scope = Scope.parse(args.scope, args.job)
    admin_from(args).pause_schedule(args.job, scope)
    print(f"paused {args.job} {scope}")
    return 0


def _resume(args: argparse.Namespace) -> int:
    scope = Scope.parse(args.scope, args.job)
    admin_from(args).resume_schedule(args.job, scope)
    print(f"resumed {args.job} {scope}")
    return 0


def _spec(s: Schedule) -> str:
    text = f"every {format_duration(s.every)}" if s.every else f"cron {s.cron!r} in {s.timezone}"
    if s.calendar is not None:
        text += f" on calendar {s.calendar!r} ({s.on_excluded})"
    return text
