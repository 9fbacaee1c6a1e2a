"""The admin's executions and schedules pages (pgsched/django/admin.py) in the test project,
served by ``manage.py runserver`` and driven in Debian's Chromium: executions filtered and
paged by keyset across the scopes of one plan, one opened on its traceback; a dynamic job's
schedules created, refused, edited, paused and deleted through the forms, each write recorded
as the user's; a staff user who may read but not operate refused every write."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.waiting import wait_until

from .conftest import USER_PASSWORD, Project, browser_page, served, sign_in

# A staff user who reads the executions and schedules but has no pgsched.operate.
VIEWER = f"""
from django.contrib.auth.models import Permission, User
viewer = User.objects.create_user("viewer", password="{USER_PASSWORD}", is_staff=True)
viewer.user_permissions.set(Permission.objects.filter(
    content_type__app_label="pgsched", codename__in=["view_execution", "view_schedule"]))
"""
PLAN = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)  # the seeded rows' plan, long past


@pytest.fixture
def site(project: Project, tmp_path: Path) -> Iterator[str]:
    with served(project, tmp_path, "wsgi") as url:
        project.ok("shell", "-c", VIEWER)
        yield url


@pytest.fixture
def page(site: str) -> Iterator[Any]:
    with browser_page() as page:
        yield page


def _follow(page: Any, selector: str) -> None:
    """Click what loads a new page, and wait until it has."""
    with page.expect_navigation():
        page.click(selector)


def _db(pg_dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(pg_dsn, autocommit=True)


def _seed(pg_dsn: str, schema: str, rows: list[tuple[str, datetime, str]]) -> None:
    """Executions of count_orders: (scope id of kind t, plan, status) each."""
    insert = sql.SQL(
        "INSERT INTO {} (job_name, scope_kind, scope_id, plan_time, trigger, status)"
        " VALUES ('count_orders', 't', %s, %s, 'schedule', %s)"
    ).format(sql.Identifier(schema, "cron_executions"))
    with _db(pg_dsn) as conn:
        for scope_id, plan, status in rows:
            conn.execute(insert, (scope_id, plan, status))


def _shown(page: Any) -> list[tuple[str, str, str, str]]:
    """The executions of the page: (id, job, scope, status) each."""
    found = []
    for row in page.locator("#result_list tr.execution").all():
        found.append(
            (
                row.get_attribute("data-id"),
                row.locator(".job").inner_text(),
                row.locator(".scope").inner_text(),
                row.locator(".status").inner_text(),
            )
        )
    return found


def test_executions_filter_and_page_by_keyset_across_one_plan_s_scopes(
    page: Any, site: str, pg_dsn: str, schema: str
) -> None:
    # Seven successes and two failures share one plan; one success an hour before it, one
    # two days before (outside the window asked for).
    shared = [(str(n), PLAN, "SUCCESS") for n in (5, 2, 7, 1, 4, 6, 3)]
    _seed(pg_dsn, schema, [*shared, ("8", PLAN, "FAILED"), ("9", PLAN, "FAILED")])
    _seed(pg_dsn, schema, [("1", PLAN - timedelta(hours=1), "SUCCESS")])
    _seed(pg_dsn, schema, [("1", PLAN - timedelta(days=2), "SUCCESS")])
    sign_in(page, site + "/admin/pgsched/execution/", "boss")
    page.select_option("#id_job", "count_orders")
    page.select_option("#id_status", "SUCCESS")
    page.fill("#id_since", "2026-01-04 00:00:00")
    page.fill("#id_until", "2026-01-06 00:00:00")
    page.fill("#id_limit", "3")
    _follow(page, "#pgsched-filter button[type=submit]")
    pages = [_shown(page)]
    while page.locator("#pgsched-next").count():
        _follow(page, "#pgsched-next")
        pages.append(_shown(page))
    assert [len(p) for p in pages] == [3, 3, 2]  # two boundaries inside the shared plan
    seen = [row for p in pages for row in p]
    assert len({row[0] for row in seen}) == len(seen)  # no row twice
    assert [row[2] for row in seen] == [f"t:{n}" for n in range(1, 8)] + ["t:1"]
    assert {(row[1], row[3]) for row in seen} == {("count_orders", "SUCCESS")}

    # Filtered by scope, from the first page again (the form carries no keyset).
    page.fill("#id_scope", "t:1")
    _follow(page, "#pgsched-filter button[type=submit]")
    assert [row[2] for row in _shown(page)] == ["t:1", "t:1"]
    assert page.locator("#pgsched-next").count() == 0


def test_an_execution_opens_on_its_traceback(
    page: Any, site: str, project: Project, pg_dsn: str, schema: str
) -> None:
    project.ok("pgsched", "trigger", "audit")
    failed = sql.SQL(
        "SELECT id FROM {} WHERE job_name = 'audit' AND status = 'FAILED' AND next_retry_at IS NULL"
    ).format(sql.Identifier(schema, "cron_executions"))

    def failure() -> Any:
        with _db(pg_dsn) as conn:
            row = conn.execute(failed).fetchone()
        return None if row is None else row[0]

    execution_id = wait_until(failure, 60, "audit's run failed")
    sign_in(page, site + "/admin/pgsched/execution/", "boss")
    page.select_option("#id_job", "audit")
    page.select_option("#id_status", "FAILED")
    _follow(page, "#pgsched-filter button[type=submit]")
    assert [row[0] for row in _shown(page)] == [str(execution_id)]
    _follow(page, f"tr[data-id='{execution_id}'] a")
    page.wait_for_url(f"**/admin/pgsched/execution/{execution_id}/")
    assert page.locator("#pgsched-status").inner_text() == "FAILED"
    traceback = page.locator("#attempt-1 pre.traceback").inner_text()
    assert "Traceback (most recent call last)" in traceback
    assert "ValueError: ledger out of balance" in traceback


def _schedules(pg_dsn: str, schema: str) -> dict[str, tuple[str | None, bool]]:
    """remind's stored schedules: scope -> (cron, paused)."""
    with _db(pg_dsn) as conn:
        rows = conn.execute(
            sql.SQL(
                "SELECT scope_kind || ':' || scope_id, cron, paused FROM {}"
                " WHERE job_name = 'remind'"
            ).format(sql.Identifier(schema, "schedules"))
        ).fetchall()
    return {scope: (cron, paused) for scope, cron, paused in rows}


def _calendar(pg_dsn: str, schema: str, scope: str) -> tuple[str | None, str]:
    """The calendar of remind's schedule of ``scope`` and its on_excluded."""
    kind, ident = scope.split(":")
    with _db(pg_dsn) as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT calendar, on_excluded FROM {}"
                " WHERE job_name = 'remind' AND scope_kind = %s AND scope_id = %s"
            ).format(sql.Identifier(schema, "schedules")),
            (kind, ident),
        ).fetchone()
    assert row is not None
    return row[0], str(row[1])


def _last_action(pg_dsn: str, schema: str) -> tuple[str, str, str, str]:
    with _db(pg_dsn) as conn:
        row = conn.execute(
            sql.SQL("SELECT actor, surface, action, scope FROM {} ORDER BY id DESC LIMIT 1").format(
                sql.Identifier(schema, "actions")
            )
        ).fetchone()
    assert row is not None
    actor, surface, action, scope = row
    return str(actor), str(surface), str(action), str(scope)


def _fill_schedule(page: Any, scope: str | None, cron: str, every: str = "") -> None:
    if scope is not None:
        page.fill("#id_scope", scope)
    page.fill("#id_cron", cron)
    page.fill("#id_every", every)
    page.fill("#id_timezone", "Europe/Paris")
    page.fill("#id_payload", '{"to": "ops@example.com"}')
    _follow(page, "#pgsched-save")


def _act_on(page: Any, scope: str, action: str) -> None:
    page.locator(f"tr.schedule[data-scope='{scope}'] input[type=checkbox]").check()
    page.select_option("#pgsched-action", action)
    _follow(page, "#pgsched-schedules button[type=submit]")


def test_a_dynamic_job_s_schedules_are_written_through_the_forms(
    page: Any, site: str, pg_dsn: str, schema: str
) -> None:
    sign_in(page, site + "/admin/pgsched/schedule/", "boss")
    page.select_option("#pgsched-job-pick", "remind")
    page.wait_for_url("**/admin/pgsched/schedule/?job=remind")
    _follow(page, "#pgsched-add")
    _fill_schedule(page, "tenant:1", "0 9 * * 1-5")
    page.wait_for_url("**/admin/pgsched/schedule/?job=remind")
    assert "Schedule tenant:1 of remind saved" in page.locator(".messagelist").inner_text()
    row = page.locator("tr.schedule[data-scope='tenant:1']")
    assert row.locator(".cron").inner_text() == "0 9 * * 1-5"
    assert "ops@example.com" in row.locator(".payload").inner_text()
    assert _schedules(pg_dsn, schema) == {"tenant:1": ("0 9 * * 1-5", False)}
    assert _last_action(pg_dsn, schema) == ("boss", "django_admin", "schedule_put", "tenant:1")

    # A cron the core refuses: its one line on the form, nothing written.
    _follow(page, "#pgsched-add")
    _fill_schedule(page, "tenant:2", "61 * * * *")
    error = page.locator("#pgsched-error").inner_text()
    assert "61" in error and "\n" not in error.strip()
    assert "/edit/" in page.url
    assert _schedules(pg_dsn, schema) == {"tenant:1": ("0 9 * * 1-5", False)}

    # An add of a scope that has a schedule replaces nothing.
    _fill_schedule(page, "tenant:1", "0 0 * * *")
    assert "has a schedule already" in page.locator("#pgsched-schedule-form").inner_text()
    assert _schedules(pg_dsn, schema) == {"tenant:1": ("0 9 * * 1-5", False)}

    # A cadence instead of a cron; both at once is refused as well.
    page.fill("#id_scope", "tenant:3")
    _fill_schedule(page, None, "0 9 * * *", every="15m")
    assert "cron" in page.locator("#pgsched-error").inner_text()
    _fill_schedule(page, None, "", every="15m")
    page.wait_for_url("**/admin/pgsched/schedule/?job=remind")
    assert page.locator("tr.schedule[data-scope='tenant:3'] .every").inner_text() == "15m"
    _act_on(page, "tenant:3", "delete")
    assert _schedules(pg_dsn, schema) == {"tenant:1": ("0 9 * * 1-5", False)}

    # Edited: the scope is fixed, the cron replaced.
    page.goto(site + "/admin/pgsched/schedule/?job=remind")
    _follow(page, "tr.schedule[data-scope='tenant:1'] a")
    assert page.locator("#id_scope").is_disabled()
    _fill_schedule(page, None, "30 8 * * *")
    page.wait_for_url("**/admin/pgsched/schedule/?job=remind")
    assert _schedules(pg_dsn, schema) == {"tenant:1": ("30 8 * * *", False)}

    _act_on(page, "tenant:1", "pause")
    assert "Pause: 1 of 1 schedule(s) done" in page.locator(".messagelist").inner_text()
    assert _schedules(pg_dsn, schema) == {"tenant:1": ("30 8 * * *", True)}
    assert _last_action(pg_dsn, schema) == ("boss", "django_admin", "schedule_pause", "tenant:1")
    assert "paused" in page.locator("tr.schedule[data-scope='tenant:1'] .paused").inner_text()

    # An edit of a paused schedule keeps it paused; a calendar the scheduler does not name
    # is refused, one it names is stored with what an excluded plan does.
    _follow(page, "tr.schedule[data-scope='tenant:1'] a")
    page.fill("#id_calendar", "nowhere")
    _fill_schedule(page, None, "45 8 * * *")
    assert "nowhere" in page.locator("#pgsched-error").inner_text()
    assert _schedules(pg_dsn, schema) == {"tenant:1": ("30 8 * * *", True)}
    page.fill("#id_calendar", "shop-days")
    page.select_option("#id_on_excluded", "next_working_day")
    _fill_schedule(page, None, "45 8 * * *")
    page.wait_for_url("**/admin/pgsched/schedule/?job=remind")
    assert _schedules(pg_dsn, schema) == {"tenant:1": ("45 8 * * *", True)}
    assert _calendar(pg_dsn, schema, "tenant:1") == ("shop-days", "next_working_day")
    calendar = page.locator("tr.schedule[data-scope='tenant:1'] .calendar").inner_text()
    assert calendar == "shop-days (next_working_day)"

    _act_on(page, "tenant:1", "delete")
    assert "Delete: 1 of 1 schedule(s) done" in page.locator(".messagelist").inner_text()
    assert _schedules(pg_dsn, schema) == {}
    assert _last_action(pg_dsn, schema) == ("boss", "django_admin", "schedule_delete", "tenant:1")
    assert page.locator("tr.schedule").count() == 0


def test_a_user_without_operate_reads_but_every_write_is_refused(
    page: Any, site: str, pg_dsn: str, schema: str
) -> None:
    sign_in(page, site + "/admin/pgsched/schedule/", "boss")
    page.goto(site + "/admin/pgsched/schedule/edit/?job=remind")
    _fill_schedule(page, "tenant:7", "0 7 * * *")
    page.wait_for_url("**/admin/pgsched/schedule/?job=remind")
    page.context.clear_cookies()

    sign_in(page, site + "/admin/pgsched/schedule/?job=remind", "viewer")
    assert page.locator("tr.schedule[data-scope='tenant:7']").count() == 1  # it reads
    assert page.locator("#pgsched-add").count() == 0
    assert page.locator("#pgsched-action").count() == 0
    token = page.locator("input[name=csrfmiddlewaretoken]").first.get_attribute("value")
    headers = {"Origin": site, "Referer": page.url}
    pause = {"csrfmiddlewaretoken": token, "job": "remind", "action": "pause"}
    refused = page.request.post(page.url, form={**pause, "scope": "tenant:7"}, headers=headers)
    assert refused.status == 403
    assert "CSRF" not in refused.text()  # refused for the permission, the token was good
    edit = site + "/admin/pgsched/schedule/edit/?job=remind"
    put = {"csrfmiddlewaretoken": token, "scope": "tenant:8", "cron": "0 8 * * *"}
    refused = page.request.post(edit, form={**put, "timezone": "UTC"}, headers=headers)
    assert refused.status == 403
    assert "CSRF" not in refused.text()
    assert _schedules(pg_dsn, schema) == {"tenant:7": ("0 7 * * *", False)}
    # The executions read, the jobs' operations page refused as before (no view of jobs).
    assert page.request.get(site + "/admin/pgsched/execution/").status == 200
    assert page.request.get(site + "/admin/pgsched/job/").status == 403
