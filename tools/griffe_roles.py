"""A griffe extension for the docs site: pgsched's docstrings name other objects with Sphinx
roles (``:class:`Run```, ``:meth:`~Scheduler.job```), which Markdown would show as they are
written; this makes each a code span before mkdocstrings renders the docstring."""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:class|meth|func|attr|exc|data|mod|obj|const):`~?([^`]+)`")


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(r"`\1`", obj.docstring.value)
