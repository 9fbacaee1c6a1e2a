"""pgsched's benchmark: ``python -m bench`` (see docs/performance.md)."""
