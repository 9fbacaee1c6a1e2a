"""The helpers every workload's modules share: the results folder, the log line, the one job's
name, a chart line's style, a peer's schema setup, and the pinned peers' virtualenvs.

Standard library only: the chart reads the registry (:mod:`bench.registry`), and so this,
from the peers' virtualenv.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from bench import REPO

RESULTS = REPO / "bench" / "results"
JOB = "bench"  # the one job (or task) every contender runs

PEERS_VENV = REPO / "bench" / ".venv-peers"
PEERS_REQUIREMENTS = REPO / "bench" / "requirements-peers.txt"
# oban-py needs Python 3.12 or later, which the project does not: it gets a virtualenv of its
# own, made with the first such interpreter found (BENCH_PYTHON312, then python3.13 or
# python3.12 on PATH, then pyenv's).
OBAN_VENV = REPO / "bench" / ".venv-oban"
OBAN_REQUIREMENTS = REPO / "bench" / "requirements-oban.txt"
OBAN_MIN_PYTHON = (3, 12)


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def line(**style: Any) -> Mapping[str, Any]:
    """A chart line's matplotlib keyword arguments (read-only)."""
    return MappingProxyType(style)


def peer_setup(module: str, python: str, env: Mapping[str, str], timeout_s: float) -> None:
    """``python -m bench.peers.MODULE setup``: a peer's schema in the fresh database."""
    subprocess.run(
        [python, "-m", f"bench.peers.{module}", "setup"],
        check=True,
        env=dict(env),
        cwd=REPO,
        capture_output=True,
        timeout=timeout_s,
    )


def peers_python(install: bool) -> tuple[str | None, str]:
    """The peers' virtualenv interpreter (created from the pinned requirements), or why not."""
    return venv_python(PEERS_VENV, PEERS_REQUIREMENTS, sys.executable, install)


def oban_python(install: bool) -> tuple[str | None, str]:
    """oban's virtualenv interpreter, or why not."""
    base = python_at_least(OBAN_MIN_PYTHON)
    if base is None:
        version = ".".join(map(str, OBAN_MIN_PYTHON))
        return None, f"oban-py needs Python >= {version} and none was found"
    return venv_python(OBAN_VENV, OBAN_REQUIREMENTS, base, install)


def python_at_least(version: tuple[int, int]) -> str | None:
    """An interpreter of ``version`` or later, or None."""
    candidates = [os.environ.get("BENCH_PYTHON312", ""), sys.executable]
    candidates += [shutil.which(f"python3.{minor}") or "" for minor in (14, 13, 12)]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python")))
    wanted = f"import sys; sys.exit(sys.version_info < {version!r})"
    for python in filter(None, candidates):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            done = subprocess.run([python, "-c", wanted], capture_output=True, timeout=30)
            if done.returncode == 0:
                return python
    return None


def venv_python(venv: Path, requirements: Path, base: str, install: bool) -> tuple[str | None, str]:
    """``venv``'s interpreter, the virtualenv created by ``base`` from the pinned
    ``requirements`` when missing or stale, or why not."""
    python = venv / "bin" / "python"
    marker = venv / ".requirements"
    wanted = requirements.read_text()
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return str(python), ""
    if not install:
        return None, f"the virtualenv {venv.name} is missing and --no-install was given"
    log(f"creating the virtualenv {venv} from {requirements.name}")
    try:
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "-r", str(requirements)],
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
        )
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        detail = getattr(exc, "stderr", "") or str(exc)
        return None, f"could not install the pinned peers: {detail.strip()[-300:]}"
    marker.write_text(wanted)
    return str(python), ""


# A contender's ``venv`` -> its interpreter (or why not).
VENVS: dict[str, Callable[[bool], tuple[str | None, str]]] = {
    "peers": peers_python,
    "oban": oban_python,
}
