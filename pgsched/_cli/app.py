"""Loading the user's config module named by the command line's APP argument."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from .._errors import AppLoadError, ConfigError
from .._scheduler import Scheduler


def load_scheduler(app: str) -> Scheduler:
    """Import ``module``, ``module:attr``, ``path.py`` or ``path.py:attr`` (attr: scheduler).

    Every failure is an :class:`AppLoadError` (or the module's own :class:`ConfigError`)
    with a one-line message.
    """
    target, _, attr = app.partition(":")
    attr = attr or "scheduler"
    if not target:
        raise AppLoadError(f"APP {app!r} names no module or file")
    module = _import_path(target) if target.endswith(".py") else _import_module(target)
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise AppLoadError(f"APP {app!r}: {target} has no attribute {attr!r}") from None
    if not isinstance(obj, Scheduler):
        raise AppLoadError(
            f"APP {app!r}: {attr} is a {type(obj).__name__}, not a pgsched.Scheduler"
        )
    return obj


def _import_module(name: str) -> object:
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        return importlib.import_module(name)
    except ConfigError:
        raise
    except Exception as exc:
        raise AppLoadError(f"cannot import APP module {name!r}: {_one_line(exc)}") from None


def _import_path(path_text: str) -> object:
    path = Path(path_text)
    if not path.is_file():
        raise AppLoadError(f"APP file {path_text!r} does not exist")
    name = f"pgsched_app_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise AppLoadError(f"APP file {path_text!r} cannot be loaded as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    sys.path.insert(0, str(path.resolve().parent))  # so the file can import its neighbours
    try:
        spec.loader.exec_module(module)
    except ConfigError:
        raise
    except Exception as exc:
        raise AppLoadError(f"cannot import APP file {path_text!r}: {_one_line(exc)}") from None
    return module


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, SyntaxError) and exc.lineno is not None:
        text = f"SyntaxError: {exc.msg} ({exc.filename}, line {exc.lineno})"
    return " ".join(text.split())
