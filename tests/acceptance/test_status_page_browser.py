"""The status page in a real browser: headless Chromium (Debian's `chromium`) renders it.

Skipped where Chromium is not installed (`apt-get install chromium`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.replica import Replica
from tests.support.waiting import wait_until

pytestmark = [
    pytest.mark.acceptance,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed"),
]

APP = textwrap.dedent(
    """
    import pgsched
    scheduler = pgsched.Scheduler(tick_interval="0.5s")

    @scheduler.job(every="1s", scopes=[pgsched.Scope("tenant", "<b>acme</b>")])
    def nightly_rollup(run):
        return 3

    @scheduler.job(every="1h")
    def always_fails(run):
        raise RuntimeError("upstream <i>unavailable</i>")
    """
)


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    flags = [
        "--headless",
        *CHROMIUM_ARGS,
        f"--user-data-dir={tempfile.mkdtemp(prefix='chromium-')}",
        "--window-size=1400,1000",
    ]
    return subprocess.run(
        [CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=60, check=True
    )


def test_status_page_renders_in_chromium(pg_dsn: str, schema: str, tmp_path: Path) -> None:
    (tmp_path / "app.py").write_text(APP)
    env = {**os.environ, "PGSCHED_DSN": pg_dsn}
    migrate = [sys.executable, "-m", "pgsched", "--schema", schema, "migrate"]
    subprocess.run(migrate, env=env, check=True, capture_output=True)
    replica = Replica(
        ["--schema", schema, "run", "app.py", "--http-port", "0"], cwd=tmp_path, env=env
    )
    try:
        url = f"http://127.0.0.1:{replica.http_port()}/"

        def rendered() -> str:
            dom = _chromium("--dump-dom", url).stdout
            return dom if "always_fails" in dom and "SUCCESS" in dom else ""

        dom = wait_until(rendered, 30, "both jobs on the page", interval=0.5)
        shot = tmp_path / "status.png"
        _chromium(f"--screenshot={shot}", url)
    finally:
        replica.stop(30)
    # The browser built the tables, and hostile text stayed text (no <b>/<i> elements).
    assert "<table>" in dom and "nightly_rollup" in dom
    assert "&lt;b&gt;acme&lt;/b&gt;" in dom and "<b>acme</b>" not in dom
    assert "upstream &lt;i&gt;unavailable&lt;/i&gt;" in dom
    assert shot.stat().st_size > 10_000  # a real rendering, not an error page
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
