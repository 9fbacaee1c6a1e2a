"""griffe extensions for the docs site. ``SphinxRoles``: pgsched's docstrings name other objects
with Sphinx roles (``:class:`Run```, ``:meth:`~Scheduler.job```), which Markdown would show as
they are written; it makes each a code span before mkdocstrings renders the docstring.
``MirroredDocstrings``: the generated blocking methods get their coroutines' docstrings."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|attr|exc|data|mod|obj|const):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(r"`\1`", obj.docstring.value)


class MirroredDocstrings(griffe.Extension):
    """The generated blocking methods (``class SyncX(..., mirrors=X)``) take their docstrings
    from the coroutines they run when Python imports them; the docs read the source, so this
    does the same there."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for module in _modules(pkg):
            for cls in module.classes.values():
                mirrored = cls.keywords.get("mirrors")
                if not isinstance(mirrored, griffe.ExprName):
                    continue
                source = loader.modules_collection[mirrored.canonical_path]
                for name, member in cls.members.items():
                    if member.is_function and member.docstring is None and name in source.members:
                        member.docstring = source.members[name].docstring


def _modules(module: griffe.Module) -> list[griffe.Module]:
    found = [module]
    for sub in module.modules.values():
        found += _modules(sub)
    return found
