"""The docs site's API reference (docs/api.md, rendered by mkdocs from the docstrings) lists
every public name, so a name added to ``pgsched.__all__`` is documented or this fails."""

from __future__ import annotations

import re
from pathlib import Path

import pgsched

API = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_every_public_name_is_in_the_api_reference() -> None:
    rendered = set(re.findall(r"^::: pgsched\.(\w+)$", API.read_text(), re.MULTILINE))
    public = set(pgsched.__all__) - {"__version__"}
    assert public - rendered == set(), "public names missing from docs/api.md"
    assert rendered - public == set(), "docs/api.md renders names that are not public"
