"""``pgsched celery ...``: moving Celery schedules into pgsched (docs/celery.md). Parses
arguments and calls ``Admin``, nothing more."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import admin_from


def add_celery_commands(sub: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    """``celery import-django-celery-beat`` under ``sub``."""
    top = sub.add_parser("celery", help="Celery schedules in pgsched")
    commands = top.add_subparsers(required=True, metavar="ACTION", parser_class=parser_class)
    p = commands.add_parser(
        "import-django-celery-beat",
        help="copy django-celery-beat's enabled periodic tasks into schedules of the job celery",
    )
    p.add_argument(
        "--from-dsn",
        metavar="DSN",
        help="the database of django-celery-beat's tables (default: pgsched's own)",
    )
    p.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(command=_import)


def _import(args: argparse.Namespace) -> int:
    report = admin_from(args).import_django_celery_beat(args.from_dsn, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
        return 0
    for task in report.tasks:
        print(f"{task.outcome:<9} {task.name}: {task.detail}")
    counts = report.counts()
    summary = ", ".join(f"{n} {outcome}" for outcome, n in counts.items())
    tail = " (dry run: nothing written)" if report.dry_run else ""
    print(f"{summary} (job 'celery', scopes periodic_task:<name>){tail}")
    return 0
