"""The overview in Chromium at 1,920 px: it uses the window's width, shows times in UTC with
how long ago they were, and updates in place (a variable set on the page survives several
refreshes while the recent runs change). Served by a ``pgsched web`` of its own that
refreshes every second (``PGSCHED_DASHBOARD_REFRESH``), over the package's database."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.acceptance.dashboard.conftest import Site
from tests.support.replica import Replica, clean_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance


def _web_url(web: Replica) -> str:
    for line in web.output().splitlines():
        if "the dashboard is on " in line:
            return line.split("the dashboard is on ", 1)[1].strip()
    assert web.alive, web.output()
    return ""


@pytest.fixture
def fast_web(site: Site, tmp_path: Any) -> Iterator[str]:
    env = clean_env(
        {"PGSCHED_DSN": site.dsn, "PGSCHED_SCHEMA": site.schema, "PGSCHED_DASHBOARD_REFRESH": "1"}
    )
    web = Replica(["web", "--http-port", "0"], cwd=tmp_path, env=env, name="fast-web")
    try:
        yield wait_until(lambda: _web_url(web), 30, "pgsched web's address")
    finally:
        web.stop(30)


def test_overview_is_wide_shows_zoned_relative_times_and_updates_in_place(
    browser: Any, site: Site, fast_web: str
) -> None:
    context = browser.new_context(viewport={"width": 1920, "height": 1080})
    page = context.new_page()
    page.set_default_timeout(20_000)
    try:
        page.goto(fast_web)
        width = page.evaluate("document.querySelector('main').getBoundingClientRect().width")
        assert width > 1240, width
        first = page.locator("#recent time").first
        assert first.locator("span").first.inner_text().endswith(" UTC")
        ago = first.locator(".ago").inner_text()
        assert re.fullmatch(r"just now|\d+ (s|min|h|d) ago|in \d+ (s|min|h|d)", ago), ago
        assert first.get_attribute("title") == ago

        page.evaluate("window.pgschedMarker = 'still here'")
        runs = "[...document.querySelectorAll('#recent a')].map(a => a.href).join(' ')"
        before = page.evaluate(runs)
        # The tick job runs every 2 s: the recent runs change, the page is not reloaded.
        wait_until(
            lambda: page.evaluate(runs) != before,
            30,
            "the recent runs replaced in place",
        )
        refreshed = page.evaluate("Number(document.body.dataset.refreshed || 0)")
        wait_until(
            lambda: page.evaluate("Number(document.body.dataset.refreshed || 0)") > refreshed,
            10,
            "another refresh",
        )
        assert page.evaluate("window.pgschedMarker") == "still here"
        assert page.evaluate("performance.getEntriesByType('navigation').length") == 1
    finally:
        context.close()
