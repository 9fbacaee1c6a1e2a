"""Every command whose reader closed its standard output (``pgsched runs show ID | head -2``)
stops quietly, as command-line tools do: no ``BrokenPipeError`` line, no traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.acceptance.operator_cli.ops import Ops, current_plan

pytestmark = pytest.mark.acceptance


@pytest.mark.parametrize(
    "command", [("runs", "show", "{id}"), ("runs",), ("status",), ("status", "--json")]
)
def test_a_closed_stdout_ends_the_command_quietly(ops: Ops, command: tuple[str, ...]) -> None:
    ident = str(current_plan(ops)["id"])
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes: every write meets EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pgsched", *(a.format(id=ident) for a in command)],
            cwd=ops.workdir,
            env=ops.env(),
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert done.stderr == "", done.stderr
    assert done.returncode == 141, done.returncode  # 128 + SIGPIPE, as the shell reports it
