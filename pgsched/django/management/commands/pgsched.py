"""``manage.py pgsched COMMAND ...``: every ``pgsched`` command, on the project's scheduler
(its jobs.py jobs) and the database of ``PGSCHED['DATABASE']``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError

from pgsched._cli.main import main
from pgsched._errors import ConfigError
from pgsched._secrets import redact
from pgsched.django.conf import project_scheduler

# Django's own options, which manage.py has already applied before loading this command.
_DJANGO_OPTIONS = ("--settings", "--pythonpath")


class Command(BaseCommand):  # type: ignore[misc]  # Django has no type hints
    help = "Run a pgsched command (run, check, status, runs...) on this project's jobs"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("args", nargs=argparse.REMAINDER, metavar="COMMAND ...")

    def run_from_argv(self, argv: list[str]) -> NoReturn:
        # pgsched's parser, not Django's, reads the arguments: `manage.py pgsched runs --help`
        # is pgsched's help, and its errors are pgsched's one-line errors.
        sys.exit(run_cli(argv[2:], prog=f"{Path(argv[0]).name} {argv[1]}"))

    def handle(self, *args: str, **options: Any) -> None:
        code = run_cli(args, prog="pgsched")
        if code:
            raise CommandError(f"pgsched {' '.join(args)} exited with {code}", returncode=code)


def run_cli(argv: Sequence[str], prog: str) -> int:
    """The ``pgsched`` command line on the project's scheduler; its exit status."""
    try:
        scheduler = project_scheduler()
    except ConfigError as exc:
        print(f"pgsched: error: {redact(str(exc))}", file=sys.stderr)
        return 1
    return main(_without_django_options(argv), scheduler=scheduler, prog=prog)


def _without_django_options(argv: Sequence[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in _DJANGO_OPTIONS:
            skip = True  # its value is the next argument
        elif not arg.startswith(tuple(f"{o}=" for o in _DJANGO_OPTIONS)):
            kept.append(arg)
    return kept
