"""pgsched's benchmark: ``python -m bench`` (see docs/performance.md)."""

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
