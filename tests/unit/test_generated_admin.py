"""``Admin``'s methods and the ``Scheduler``'s shortcuts are generated from the operations
core's coroutines (tools/gen_admin.py): the generated module is current, a change of the core
reaches it only through the tool (``--check`` names the stale line), each method has its
coroutine's docstring (attached on import, not copied), and the shortcuts take what ``Admin``
takes."""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import shutil
import sys
import typing
from pathlib import Path
from types import ModuleType

import pytest

import pgsched
from pgsched._portal import Portal

ROOT = Path(__file__).resolve().parents[2]


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_admin", ROOT / "tools" / "gen_admin.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_admin"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


GEN = _tool()


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of what the tool reads and writes, to change without touching the checkout."""
    shutil.copytree(ROOT / "pgsched" / "_operations", tmp_path / "pgsched" / "_operations")
    (tmp_path / "pgsched" / "_facades").mkdir()
    shutil.copy(
        ROOT / "pgsched" / "_facades" / "sync_operations.py", tmp_path / "pgsched" / "_facades"
    )
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    return tmp_path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))


def test_the_generated_module_is_what_the_tool_makes() -> None:
    assert GEN.generate(ROOT) == (ROOT / GEN.TARGET).read_text()
    assert GEN.main(["--check"]) == 0


def test_check_names_the_first_stale_line_of_a_changed_signature(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    core = tree / "pgsched" / "_operations" / "core.py"
    _edit(
        core,
        "async def failed_attempts(self, limit: int = 20)",
        "async def failed_attempts(self, limit: int = 25)",
    )
    assert GEN.main(["--check", "--root", str(tree)]) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert "pgsched/_facades/sync_operations.py is stale" in line
    assert "'def failed_attempts(self, limit: int=25) -> list[FailedAttempt]:'" in line
    assert "run python tools/gen_admin.py" in line
    assert GEN.main(["--root", str(tree)]) == 0
    assert GEN.main(["--check", "--root", str(tree)]) == 0
    generated = (tree / GEN.TARGET).read_text()
    # once: Admin and the Scheduler inherit the same method
    assert generated.count("    def failed_attempts(") == 1


def test_the_methods_carry_the_docstrings_of_the_coroutines_written_nowhere_else() -> None:
    from pgsched._operations.core import Operations

    generated = (ROOT / GEN.TARGET).read_text()
    public = {
        n
        for c in Operations.__mro__
        for n, v in vars(c).items()
        if not n.startswith("_") and inspect.iscoroutinefunction(v)
    }
    assert len(public) > 30
    for name in public:
        doc = getattr(Operations, name).__doc__
        assert doc and getattr(pgsched.Admin, name).__doc__ == doc, name
        assert doc.splitlines()[0] not in generated, name
    for name in GEN.SHORTCUTS:
        assert getattr(pgsched.Scheduler, name).__doc__ == getattr(Operations, name).__doc__


def test_a_new_coroutine_of_the_core_becomes_an_admin_method(tree: Path) -> None:
    tasks = tree / "pgsched" / "_operations" / "tasks.py"
    method = (
        "    async def imported_jobs(self, source: str, *, limit: int = 5) -> list[UUID]:\n"
        '        """The jobs an importer brought from ``source``."""\n'
        "        return []\n\n"
    )
    text = tasks.read_text()
    first = text.index("    async def ")  # the new coroutine becomes the class's first
    tasks.write_text(text[:first] + method + text[first:])
    generated = GEN.generate(tree)
    assert "    def imported_jobs(self, source: str, *, limit: int=5) -> list[UUID]:\n" in (
        generated
    )
    assert "The jobs an importer brought" not in generated  # attached on import
    assert "return PORTAL.call(self._core().imported_jobs(source, limit=limit))" in generated
    assert "async" not in generated and "await" not in generated


def test_a_coroutine_without_a_docstring_is_refused_in_one_line(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    core = tree / "pgsched" / "_operations" / "core.py"
    docstring = '"""True when every migration this version ships has been applied."""'
    _edit(core, f"        {docstring}\n", "")
    before = (tree / GEN.TARGET).read_text()
    assert GEN.main(["--root", str(tree)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "pgsched/_operations/core.py:" in line and "is_migrated has no docstring" in line
    assert (tree / GEN.TARGET).read_text() == before  # nothing half-written


def test_the_scheduler_shortcuts_take_what_admin_takes() -> None:
    assert set(GEN.SHORTCUTS) <= {n for n in dir(pgsched.Scheduler) if not n.startswith("_")}
    for name in GEN.SHORTCUTS:
        shortcut = inspect.signature(getattr(pgsched.Scheduler, name))
        admin = inspect.signature(getattr(pgsched.Admin, name))
        assert shortcut == admin, name
        hints_s = typing.get_type_hints(getattr(pgsched.Scheduler, name))
        assert hints_s == typing.get_type_hints(getattr(pgsched.Admin, name)), name
    runs = inspect.signature(pgsched.Scheduler.runs).parameters
    assert {"scope", "since", "until"} <= set(runs)


def test_the_scheduler_has_exactly_the_shortcuts_and_checks_their_job() -> None:
    from pgsched._facades.sync_operations import SchedulerShortcuts

    assert {n for n in dir(SchedulerShortcuts) if not n.startswith("_")} == set(GEN.SHORTCUTS)
    assert "run" not in GEN.SHORTCUTS  # the Scheduler's own run(http_port), not Admin's
    source = inspect.getsource(sys.modules[SchedulerShortcuts.__module__])
    assert source.count("    def put_schedule(") == 1  # each method written once
    scheduler = pgsched.Scheduler(dsn="postgresql://x@localhost/x")  # never connects here
    guarded = {"trigger": (), "pause": (), "resume": (), "backfill": (None, None)}
    assert set(guarded) == {name for name, check in GEN.SHORTCUTS.items() if check}
    for name, rest in guarded.items():
        with pytest.raises(pgsched.NotFoundError, match="'ghost' is not registered"):
            getattr(scheduler, name)("ghost", *rest)


def test_a_blocking_call_from_the_portal_loop_is_refused_not_left_waiting() -> None:
    portal = Portal()  # its own loop: a call that did wait for ever would stall only this one

    async def inner() -> int:
        return 1

    async def outer() -> int:
        return portal.call(inner())  # a coroutine on the portal calling back into it

    future = asyncio.run_coroutine_threadsafe(outer(), portal._running())
    with pytest.raises(pgsched.PgschedError, match="would wait for ever"):
        future.result(timeout=10)  # it answers at once; 10 s only bounds a hang
