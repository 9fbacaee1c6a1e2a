"""The ``pgsched`` command run by its own entry point inside the test process."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class CliResult:
    """What one ``pgsched`` command printed and its exit status."""

    returncode: int
    stdout: str
    stderr: str


def cli_in_process(
    args: Sequence[str], *, env: Mapping[str, str], cwd: Path, capfd: pytest.CaptureFixture[str]
) -> CliResult:
    """``pgsched ARGS`` run by its own entry point in this process (what ``python -m pgsched``
    runs, without the interpreter's start-up, which costs a third of a second a command).

    Output is captured at the file descriptors, so whatever the command or a library writes
    is seen. The process-wide state a command sets is put back afterwards: the environment,
    the working directory, the logging set-up and the passwords the CLI remembered for
    redaction (each command redacts only what it learned itself, as a new process would)."""
    import structlog

    from pgsched import _secrets
    from pgsched._cli.main import main

    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_log, root = structlog.get_config(), logging.getLogger()
    saved_handlers, saved_level = root.handlers[:], root.level
    saved_secrets = set(_secrets._KNOWN_SECRETS)
    capfd.readouterr()
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    _secrets._KNOWN_SECRETS.clear()
    try:
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 1
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        structlog.configure(**saved_log)
        root.handlers, root.level = saved_handlers, saved_level
        _secrets._KNOWN_SECRETS.clear()
        _secrets._KNOWN_SECRETS.update(saved_secrets)
    captured = capfd.readouterr()
    return CliResult(code, captured.out, captured.err)
