"""Options of the chaos suite (see docs/reliability.md).

pytest reads these only when ``tests/chaos`` is named on the command line (a sub-directory's
conftest is not loaded before the command line is parsed); ``PGSCHED_CHAOS_LONG=1`` and
``PGSCHED_CHAOS_FIGURES=path.json`` work from anywhere.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("chaos", "pgsched chaos suite")
    group.addoption(
        "--chaos-long",
        action="store_true",
        default=False,
        help="run the chaos scenarios at full length (as PGSCHED_CHAOS_LONG=1)",
    )
    group.addoption(
        "--chaos-figures",
        default=None,
        metavar="PATH",
        help="merge each scenario's figures into this JSON file (as PGSCHED_CHAOS_FIGURES)",
    )
