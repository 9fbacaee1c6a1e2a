"""The processes a trial starts (a contender's replicas, the HA workload's beats): each in a
session of its own, with its output in ``run_dir/<name>-<i>.log``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bench import REPO, measure


class Processes:
    """``count`` processes, the ``i``-th running ``command(i)`` in the environment ``env(i)``;
    ``stop()`` gives each ``grace_s`` after SIGTERM before it kills its session."""

    def __init__(
        self,
        name: str,
        count: int,
        command: Callable[[int], list[str]],
        env: Callable[[int], dict[str, str]],
        run_dir: Path,
        grace_s: float,
    ) -> None:
        self.name, self.count, self.command, self.env = name, count, command, env
        self.run_dir, self.grace_s = run_dir, grace_s
        self.procs: list[subprocess.Popen[bytes]] = []

    def log_path(self, i: int) -> Path:
        return self.run_dir / f"{self.name}-{i}.log"

    def start(self) -> None:
        for i in range(self.count):
            with open(self.log_path(i), "wb") as out:
                self.procs.append(
                    subprocess.Popen(
                        self.command(i),
                        cwd=REPO,
                        env=self.env(i),
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )

    def stop(self) -> list[int | None]:
        """SIGTERM every process still running, SIGKILL its session after the grace; their
        exit codes. Nothing is left to stop afterwards."""
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        exits = [p.returncode for p in self.procs]
        self.procs = []
        return exits

    def kill(self, i: int) -> None:
        """SIGKILL the ``i``-th process's session at once."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.procs[i].pid, signal.SIGKILL)

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def crashed(self) -> list[int]:
        return [i for i, p in enumerate(self.procs) if p.poll() is not None]

    def cpu_s(self) -> list[float | None]:
        return [measure.proc_cpu_s(p.pid) for p in self.procs]

    def peak_rss_mb(self) -> list[float | None]:
        return [measure.proc_peak_rss_mb(p.pid) for p in self.procs]
