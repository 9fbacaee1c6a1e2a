"""``pgsched run`` replicas as real subprocesses (``python -m pgsched ARGS``).

Their output goes to files, never to a pipe: a pipe nobody reads fills up and stalls a replica
that logs every run, and a file can still be read after the process died. stdout and stderr
are merged into one log, or kept apart (``separate_stderr``) for tests of where each line goes.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.support.net import Response, http
from tests.support.waiting import wait_until

# The environment a test's replica must not inherit from the developer's shell.
_FOREIGN_ENV = ("PGSCHED_", "DATABASE_URL")
# The tests' own choice, not a leftover of the developer's shell: kept (tests/conftest.py).
_TESTS_ENV = ("PGSCHED_FIRST_SIGHT",)


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without pgsched's settings and ``DATABASE_URL``, plus
    ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_FOREIGN_ENV) or k in _TESTS_ENV}
    env.update(extra or {})
    return env


class Replica:
    """One ``python -m pgsched ARGS`` subprocess, its output in ``log`` (and ``err_log``)."""

    def __init__(
        self,
        args: list[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        name: str = "replica",
        log: Path | None = None,
        separate_stderr: bool = False,
        program: tuple[str, ...] = ("-m", "pgsched"),
        wrap: tuple[str, ...] = (),
    ) -> None:
        """``program`` is what the interpreter runs ARGS with: ``("manage.py",)`` runs a
        Django project's ``manage.py ARGS``; ``wrap`` the command the interpreter runs under
        (``tests.support.partition.as_uid``: another user's)."""
        self.name, self.args = name, args
        self.log = log or _unused(cwd / f"{name}.log")
        self.err_log = self.log.with_suffix(".err") if separate_stderr else None
        self.suspended = False  # SIGSTOPped
        # SIGTERM sent: not sent again by stop(), since a second one may cut the graceful
        # shutdown the first started short.
        self.terminating = False
        self.port = 0  # its HTTP server's, once known
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.ExitStack() as files:
            out = files.enter_context(self.log.open("wb"))
            err: Any = subprocess.STDOUT
            if self.err_log is not None:
                err = files.enter_context(self.err_log.open("wb"))
            self.proc = subprocess.Popen(
                [*wrap, sys.executable, *program, *args],
                cwd=cwd,
                env=dict(env),
                stdout=out,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )

    @classmethod
    def run(
        cls, app: str, runner_id: str, *, cwd: Path, env: Mapping[str, str], **options: Any
    ) -> Replica:
        """``pgsched run APP --runner-id RUNNER_ID --http-port 0`` (the port it picked is in its
        ``http_listening`` log event: :meth:`http_port`)."""
        args = ["run", app, "--runner-id", runner_id, "--http-port", "0"]
        return cls(args, cwd=cwd, env=env, name=runner_id, **options)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    # -- what it wrote --------------------------------------------------------------------

    def output(self) -> str:
        """Everything in the log (stdout, and stderr unless kept apart) so far."""
        return _read(self.log)

    def errors(self) -> str:
        """stderr so far, when kept apart ("" otherwise)."""
        return _read(self.err_log) if self.err_log is not None else ""

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The JSON log lines written so far (of event ``name``), from both streams."""
        found = []
        for line in (self.output() + self.errors()).splitlines():
            if not line.startswith("{"):
                continue
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if isinstance(event, dict) and name in (None, event.get("event")):
                    found.append(event)
        return found

    def check_alive(self) -> bool:
        """True while it runs; once it exited, an AssertionError with its output's tail."""
        if self.proc.poll() is not None:
            tail = (self.output() + self.errors())[-4000:]
            raise AssertionError(f"replica {self.name} exited with {self.proc.returncode}:\n{tail}")
        return True

    def wait_sigterm_handled(self, timeout: float = 60) -> None:
        """Wait until the process catches SIGTERM (Linux: its SigCgt mask), as ``pgsched run``
        does from its first line on: before that, a SIGTERM kills it (-15) as it does any
        process still starting."""
        bit = 1 << (signal.SIGTERM - 1)

        def caught() -> bool:
            self.check_alive()
            with contextlib.suppress(OSError):
                for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                    if line.startswith("SigCgt:"):
                        return bool(int(line.split()[1], 16) & bit)
            return False

        wait_until(caught, timeout, f"replica {self.name} to handle SIGTERM", interval=0.05)

    def wait_event(self, name: str, timeout: float = 30) -> dict[str, Any]:
        """The first log event ``name``, waited for while the replica runs."""

        def logged() -> list[dict[str, Any]]:
            self.check_alive()
            return self.events(name)

        def missing() -> str:
            tail = "\n".join(self.output().splitlines()[-10:]) or "(nothing yet)"
            return f"replica {self.name}'s {name} log event; its log ends:\n{tail}"

        found = wait_until(logged, timeout, missing, interval=0.05)
        return found[0]

    def http_port(self, timeout: float = 30) -> int:
        """The port of its HTTP server (from its ``http_listening`` event); kept for
        :meth:`url`."""
        self.port = int(self.wait_event("http_listening", timeout)["port"])
        return self.port

    def url(self, path: str) -> str:
        assert self.port, f"replica {self.name}: no HTTP port known yet (call http_port())"
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str, **options: Any) -> Response:
        return http("GET", self.url(path), **options)

    def post(self, path: str, **options: Any) -> Response:
        return http("POST", self.url(path), **options)

    # -- signals --------------------------------------------------------------------------

    def signal(self, sig: signal.Signals) -> None:
        if self.alive:
            os.kill(self.proc.pid, sig)
            self.terminating = self.terminating or sig == signal.SIGTERM

    def stop(self, timeout: float = 20) -> int | None:
        """SIGCONT (if suspended) and SIGTERM; SIGKILL after ``timeout``. The exit code
        (None: it had to be killed)."""
        if self.suspended:
            self.signal(signal.SIGCONT)
            self.suspended = False
        if not self.terminating:
            self.signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        """SIGKILL, if it still runs, and reap it."""
        if self.alive:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)


def _unused(path: Path) -> Path:
    """``path``, or ``name.2.log``, ``name.3.log``... when taken (a replica started again)."""
    n = 1
    candidate = path
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.stem}.{n}{path.suffix}")
    return candidate


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return ""
