"""The dashboard in a real browser (Playwright driving Debian's Chromium): every page, every
action and its refusal without a token, a bulk action, paging a 10,000-scope job's grid, and
layout at 1280 px and on a phone. Screenshots of each page are saved (see conftest)."""

from __future__ import annotations

import html
import time
from typing import Any

import pytest

from tests.acceptance.dashboard.conftest import HOSTILE, OPERATOR, VIEWER, Site
from tests.support.net import http
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance


def _shot(page: Any, site: Site, name: str, *, full: bool = True) -> None:
    page.screenshot(path=str(site.shots / f"{name}.png"), full_page=full)


# The elements reaching past the viewport that no scrolling box holds, to name what is wide.
_WIDE = """(limit) => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > limit + 0.5)
  .filter(e => { for (let p = e.parentElement; p; p = p.parentElement)
                   if (getComputedStyle(p).overflowX !== 'visible') return false;
                 return true; })
  .slice(-3).map(e => e.tagName + '.' + e.className + ' ' + e.getBoundingClientRect().right
                      + ': ' + e.textContent.slice(0, 60))"""


def _no_sideways_scroll(page: Any) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    limit = page.viewport_size["width"]
    assert width <= limit, f"page is {width} px wide: {page.evaluate(_WIDE, limit)}"


def _login(page: Any, base: str, token: str) -> None:
    page.goto(base + "login")
    page.fill("#token", token)
    page.click("button:has-text('Sign in')")
    page.wait_for_selector("text=signed in")


def _flash(page: Any) -> str:
    return str(page.locator(".flash").first.inner_text())


def test_overview_shows_jobs_strips_counts_and_replicas(page: Any, site: Site) -> None:
    # The overview's recent runs are the newest plans: a plan of tick (its three scopes,
    # the hostile one among them) newer than the 30,000 seeded rows of fanout, which may
    # otherwise fill them when this test runs first.
    wait_until(
        lambda: site.one(
            "SELECT count(DISTINCT plan_time) >= 2 FROM {s}.cron_executions WHERE job_name ="
            " 'tick' AND plan_time > (SELECT max(plan_time) FROM {s}.cron_executions"
            " WHERE job_name = 'fanout')"
        ),
        30,
        "two plans of tick after the seeded fanout",
    )
    page.goto(site.replica)
    jobs = page.locator("#jobs")
    for job in ("tick", "boom", "hourly", "reminder", "fanout"):
        assert jobs.locator(f"a:has-text('{job}')").count() >= 1, job
    assert page.locator("#jobs .strip a.sq").count() >= 5
    assert page.locator(".tile").count() == 6
    assert "dash-main" in page.locator("#replicas").inner_text()
    body = page.content()
    assert HOSTILE not in body and html.escape(HOSTILE) in body
    _no_sideways_scroll(page)
    _shot(page, site, "overview-1280")
    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    _no_sideways_scroll(page)
    _shot(page, site, "overview-phone")
    _shot(page, site, "overview-phone-top", full=False)
    page.goto(site.replica + "job?name=tick")
    _no_sideways_scroll(page)
    _shot(page, site, "job-phone-top", full=False)


def test_job_page_grid_charts_and_execution_page(page: Any, site: Site) -> None:
    wait_until(
        lambda: site.one("SELECT count(*) FROM {s}.cron_executions WHERE job_name = 'tick'") >= 9,
        30,
        "three plans of tick",
    )
    page.goto(site.replica + "job?name=tick")
    grid = page.locator("#grid table.grid")
    assert grid.locator("tbody tr").count() == 3
    assert html.escape(HOSTILE) in grid.inner_html()
    assert page.locator("#charts svg").count() == 2
    assert page.locator("#charts svg polyline").count() == 4
    _no_sideways_scroll(page)
    _shot(page, site, "job-tick")
    page.locator("#grid a.sq.SUCCESS").first.click()
    page.wait_for_selector("#attempts")
    assert "SUCCESS" in page.locator("#execution").inner_text()
    assert "fencing token" in page.locator("#attempts").inner_text()
    _shot(page, site, "execution")


def test_execution_page_shows_each_attempt_with_its_traceback(page: Any, site: Site) -> None:
    wait_until(lambda: site.one("SELECT count(*) FROM {s}.cron_attempts"), 30, "a failed attempt")
    ident = site.one("SELECT execution_id FROM {s}.cron_attempts LIMIT 1")
    page.goto(site.replica + f"run?id={ident}")
    attempts = page.locator("#attempts")
    assert "upstream <i>unavailable</i>" in attempts.inner_text()
    page.locator("#attempts summary").first.click()
    assert "Traceback" in attempts.inner_text()
    _shot(page, site, "execution-failed")


def test_fanout_grid_pages_and_searches_ten_thousand_scopes(page: Any, site: Site) -> None:
    started = time.monotonic()
    page.goto(site.replica + "job?name=fanout")
    took = time.monotonic() - started
    rows = page.locator("#grid table.grid tbody tr")
    assert rows.count() == 50
    assert rows.first.locator("td.scope").inner_text() == "tenant:s00000"
    assert page.locator("#grid thead th.plan").count() == 3
    _no_sideways_scroll(page)
    _shot(page, site, "job-fanout")
    page.click("text=next scopes →")
    assert rows.first.locator("td.scope").inner_text() == "tenant:s00050"
    page.fill("#q", "tenant:s0999")
    page.click("#grid button:has-text('Search')")
    assert rows.count() == 10
    assert rows.last.locator("td.scope").inner_text() == "tenant:s09999"
    page.fill("#q", "s0420")
    page.click("#grid button:has-text('Search')")
    assert rows.count() == 10
    assert took < 10, f"the 10,000-scope job page took {took:.1f} s"


def test_actions_are_refused_without_the_operator_token(page: Any, site: Site) -> None:
    page.goto(site.replica + "job?name=hourly")
    assert page.locator("button:has-text('Trigger')").count() == 0  # no buttons: not signed in
    form = {"action": "pause", "job": "hourly", "back": "./"}
    origin = site.replica.rstrip("/")
    refused = page.request.post(site.replica + "action", form=form, headers={"Origin": origin})
    assert refused.status == 401
    viewer = page.request.post(
        site.web + "action", form=form, headers={"Authorization": f"Bearer {VIEWER}"}
    )
    assert viewer.status == 403 and "PGSCHED_HTTP_TOKEN" in viewer.text()
    page.goto(site.replica + "login")
    page.fill("#token", "not-the-token")
    page.click("button:has-text('Sign in')")
    assert "not valid" in page.content()
    # Signed in, a post from another site is refused (the cookie is SameSite=Strict anyway).
    _login(page, site.replica, OPERATOR)
    foreign = page.request.post(
        site.replica + "action", form=form, headers={"Origin": "http://evil.example"}
    )
    assert foreign.status == 403
    assert not site.one("SELECT paused FROM {s}.job_state WHERE job_name = 'hourly'")


def test_trigger_pause_resume_and_cancel_are_done_and_recorded(page: Any, site: Site) -> None:
    _login(page, site.replica, OPERATOR)
    page.goto(site.replica + "job?name=hourly")
    page.click("#job button:has-text('Trigger')")
    assert "triggered hourly" in _flash(page)
    page.fill("#t-at", "2099-01-02T03:04:05")
    page.click("#job button:has-text('Trigger')")
    assert "triggered hourly" in _flash(page)
    page.locator("#pending a").first.click()
    page.click("button:has-text('Cancel')")
    assert "cancelled" in _flash(page)
    status = "SELECT status FROM {s}.cron_executions WHERE job_name = 'hourly'"
    assert site.one(status + " AND plan_time = '2099-01-02T03:04:05Z'") == "CANCELLED"
    page.goto(site.replica + "job?name=hourly")
    page.click("button:has-text('Pause job')")
    assert "hourly paused" in _flash(page)
    assert site.one("SELECT paused FROM {s}.job_state WHERE job_name = 'hourly'")
    page.click("button:has-text('Resume job')")
    assert not site.one("SELECT paused FROM {s}.job_state WHERE job_name = 'hourly'")
    # A selection: two one-offs cancelled at once.
    for at in ("2098-05-06T07:08:09", "2098-05-06T07:08:10"):
        page.fill("#t-at", at)
        page.click("#job button:has-text('Trigger')")
    boxes = page.locator("#pending input[name=target]")
    assert boxes.count() == 2
    boxes.nth(0).check()
    boxes.nth(1).check()
    page.click("button:has-text('Cancel selected')")
    assert "cancel: 2 of 2 done" in _flash(page)
    ahead = status + " AND plan_time > '2098-01-01' AND plan_time < '2099-01-01'"
    assert [r[0] for r in site.q(ahead)] == [
        "CANCELLED",
        "CANCELLED",
    ]
    log = page.locator("#actions").inner_text()
    for action in ("trigger", "cancel", "pause", "resume"):
        assert action in log, action
    assert "operator #" in log and OPERATOR not in page.content()
    _shot(page, site, "job-hourly-actions")


def test_overview_pauses_and_resumes_a_selection_of_jobs(page: Any, site: Site) -> None:
    _login(page, site.replica, OPERATOR)
    page.goto(site.replica)
    for job in ("hourly", "fanout"):
        page.locator(f"#jobs input[name=target][value='{job}']").check()
    page.click("button:has-text('Pause selected')")
    assert "pause: 2 of 2 done" in _flash(page)
    paused = "SELECT count(*) FROM {s}.job_state WHERE paused AND job_name IN ('hourly', 'fanout')"
    assert site.one(paused) == 2
    _no_sideways_scroll(page)
    _shot(page, site, "overview-operator")
    for job in ("hourly", "fanout"):
        page.locator(f"#jobs input[name=target][value='{job}']").check()
    page.click("button:has-text('Resume selected')")
    assert "resume: 2 of 2 done" in _flash(page)
    assert site.one(paused) == 0


def test_retry_now_and_a_bulk_retry(page: Any, site: Site) -> None:
    failed = (
        "SELECT count(*) FROM {s}.cron_executions WHERE job_name = 'boom' AND status = 'FAILED'"
    )
    wait_until(
        lambda: site.one(failed) >= 3,
        30,
        lambda: f"three failures of boom (every 3 s); {site.job_state('boom')}",
    )
    _login(page, site.replica, OPERATOR)
    page.goto(site.replica + "job?name=boom")
    first = page.locator("#job-failures tbody tr").first
    ident = first.locator("input[name=target]").get_attribute("value")
    first.locator("button:has-text('Retry now')").click()
    assert "due for a retry now" in _flash(page)
    attempt = "SELECT attempt FROM {s}.cron_executions WHERE id = %s"
    wait_until(lambda: site.one(attempt, (ident,)) == 2, 30, "the retried attempt")
    boxes = page.locator("#job-failures input[name=target]")
    boxes.nth(1).check()
    boxes.nth(2).check()
    page.click("button:has-text('Retry selected')")
    assert "retry: 2 of 2 done" in _flash(page)
    _shot(page, site, "job-boom")


def test_schedules_page_search_put_pause_resume_delete_and_bulk(page: Any, site: Site) -> None:
    page.goto(site.replica + "schedules?name=reminder")
    rows = page.locator("#schedules tbody tr")
    assert rows.count() == 26
    assert html.escape(HOSTILE) in page.content() and HOSTILE not in page.content()
    page.fill("#sq", "user:user-01")
    page.click("#schedules button:has-text('Search')")
    assert rows.count() == 10
    _login(page, site.replica, OPERATOR)
    page.goto(site.replica + "schedules?name=reminder")
    page.fill("#p-scope", "user:new")
    page.fill("#p-cron", "30 8 * * 1-5")
    page.fill("#p-payload", '{"text": "new"}')
    page.fill("#p-calendar", "weekdays")
    page.select_option("#p-excluded", "next_working_day")
    page.click("button:has-text('Put schedule')")
    assert "saved" in _flash(page)
    calendar = "SELECT calendar || ' ' || on_excluded FROM {s}.schedules WHERE scope_id = %s"
    assert site.one(calendar, ("new",)) == "weekdays next_working_day"
    row = page.locator("#schedules tbody tr", has_text="user:new")
    row.locator("button:has-text('Pause')").click()
    assert "paused" in _flash(page)
    paused = "SELECT paused FROM {s}.schedules WHERE scope_id = %s"
    assert site.one(paused, ("new",))
    page.locator("#schedules tbody tr", has_text="user:new").locator(
        "button:has-text('Resume')"
    ).click()
    assert not site.one(paused, ("new",))
    for scope in ("user:user-001", "user:user-002"):
        page.locator(f"#schedules input[name=target][value='{scope}']").check()
    page.click("button:has-text('Pause selected')")
    assert "schedule_pause: 2 of 2 done" in _flash(page)
    assert site.one(paused, ("user-002",))
    page.locator("#schedules tbody tr", has_text="user:new").locator(
        "button:has-text('Delete')"
    ).click()
    # A browser is asked first; nothing is deleted until it confirms.
    assert "Delete the schedule user:new of reminder?" in page.locator("#confirm").inner_text()
    assert site.one("SELECT count(*) FROM {s}.schedules WHERE scope_id = 'new'") == 1
    _shot(page, site, "schedule-delete-confirm")
    page.click("#confirm button:has-text('Yes, delete')")
    assert "deleted" in _flash(page)
    assert not site.q("SELECT 1 FROM {s}.schedules WHERE scope_id = 'new'")
    _shot(page, site, "schedules")


def test_viewer_token_guards_reading_and_pgsched_web_serves_alone(page: Any, site: Site) -> None:
    page.goto(site.web)
    assert page.locator("#token").count() == 1  # 401: the sign-in form
    assert http("GET", site.web).status == 401
    _shot(page, site, "login")
    _login(page, site.web, VIEWER)
    page.goto(site.web)
    assert page.locator("#jobs a:has-text('tick')").count() >= 1
    assert page.locator("button:has-text('Run now')").count() == 0
    page.goto(site.web + "job?name=fanout")
    assert page.locator("#grid table.grid tbody tr").count() == 50
    _shot(page, site, "web-viewer")


def test_retry_now_through_the_api_and_the_command_line(site: Site) -> None:
    import subprocess
    import sys

    from tests.support.replica import clean_env

    failed = "SELECT id FROM {s}.cron_executions WHERE job_name = 'fanout' AND status = 'FAILED'"
    first, second = (row[0] for row in site.q(failed + " ORDER BY scope_id LIMIT 2"))
    url = site.replica + f"api/runs/{first}/retry"
    assert http("POST", url).status == 401
    done = http("POST", url, token=OPERATOR)
    assert done.status == 200 and done.json()["job"] == "fanout"
    env = clean_env({"PGSCHED_DSN": site.dsn, "PGSCHED_SCHEMA": site.schema})
    cli = subprocess.run(
        [sys.executable, "-m", "pgsched", "retry", str(second)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0 and "due for a retry now" in cli.stdout, cli.stderr
    due = "SELECT count(*) FROM {s}.cron_executions WHERE id IN (%s, %s) AND max_attempts = 2"
    assert site.one(due, (first, second)) == 2
    log = site.q("SELECT actor, action, target FROM {s}.actions WHERE target = %s", (str(first),))
    assert log and log[0][1] == "retry" and log[0][0].startswith("operator #")
