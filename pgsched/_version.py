"""The installed distribution's version (hatch-vcs writes it from the git tag at build time)."""

from __future__ import annotations

from importlib import metadata


def installed_version() -> str:
    """``pgsched``'s installed version; ``0+unknown`` from a source tree never installed."""
    try:
        return metadata.version("pgsched")
    except metadata.PackageNotFoundError:
        return "0+unknown"
