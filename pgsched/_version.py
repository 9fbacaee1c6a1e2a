"""The installed distribution's version (hatch-vcs writes it from the git tag at build time)."""

from __future__ import annotations

import functools
from importlib import metadata


@functools.cache  # read from the installed metadata once: replicas ask at every registration
def installed_version() -> str:
    """``pgsched``'s installed version; ``0+unknown`` from a source tree never installed."""
    try:
        return metadata.version("pgsched")
    except metadata.PackageNotFoundError:
        return "0+unknown"
