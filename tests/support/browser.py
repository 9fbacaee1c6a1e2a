"""Debian's Chromium for the tests that look at pages: where it is and the flags every test
starts it with (no sandbox as root, no GPU, nothing fetched from the network by the browser
itself)."""

from __future__ import annotations

import shutil

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
