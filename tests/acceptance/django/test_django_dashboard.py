"""pgsched's dashboard mounted in the test project (``path("scheduler/",
include("pgsched.django.urls"))``), served over real HTTP by ``manage.py runserver`` (WSGI)
and by uvicorn (ASGI), driven in Debian's Chromium: Django's login guards it, a staff user
reads it, one with ``pgsched.operate`` acts, and the action is recorded as that user's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.waiting import wait_until

from .conftest import SERVERS, Project, browser_page, http_get, served
from .conftest import USER_PASSWORD as PASSWORD


@pytest.fixture(params=sorted(SERVERS))
def site(request: Any, project: Project, tmp_path: Path) -> Iterator[str]:
    """The project's URL, served by the server of the parameter, a replica running its jobs."""
    with served(project, tmp_path, request.param) as url:
        yield url


@pytest.fixture
def page(site: str) -> Iterator[Any]:
    with browser_page() as page:
        yield page


def _sign_in(page: Any, site: str, user: str) -> None:
    page.goto(site + "/scheduler/job?name=restock")
    assert "/admin/login/" in page.url  # Django's login, then back to the page asked for
    page.fill("#id_username", user)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/scheduler/job?name=restock")


def test_anonymous_callers_are_sent_to_django_s_login(site: str) -> None:
    port = int(site.rsplit(":", 1)[1])
    assert http_get(port, "/scheduler/") == (302, "/admin/login/?next=/scheduler/")


def test_an_operator_reads_and_acts_recorded_as_their_user(
    page: Any, site: str, project: Project, pg_dsn: str, schema: str
) -> None:
    _sign_in(page, site, "boss")
    wait_until(lambda: page.reload() and "SUCCESS" in page.content(), 30, "a restock run shown")
    assert "signed in: boss (operator)" in page.content()
    page.click("#job button:has-text('Trigger')")
    assert "triggered restock" in page.locator(".flash").inner_text()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        actor, action, outcome = conn.execute(
            sql.SQL("SELECT actor, action, outcome FROM {} ORDER BY id DESC LIMIT 1").format(
                sql.Identifier(schema, "actions")
            )
        ).fetchone() or ("", "", "")
    assert actor.startswith("boss") and action == "trigger" and outcome == "ok", actor
    page.goto(site + "/scheduler/")
    assert "restock" in page.content()


def test_a_staff_user_without_the_permission_reads_but_may_not_act(
    page: Any, site: str, pg_dsn: str, schema: str
) -> None:
    _sign_in(page, site, "clerk")
    assert "signed in: clerk (viewer)" in page.content()
    assert page.locator("#job button:has-text('Trigger')").count() == 0
    refused = page.request.post(
        site + "/scheduler/action",
        form={"action": "pause", "job": "restock", "back": "./"},
        headers={"Origin": site},
    )
    assert refused.status == 403
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        paused = conn.execute(
            sql.SQL("SELECT paused FROM {} WHERE job_name = 'restock'").format(
                sql.Identifier(schema, "job_state")
            )
        ).fetchone()
    assert paused == (False,)


def test_a_user_who_is_not_staff_is_sent_to_the_login(page: Any, site: str) -> None:
    page.goto(site + "/admin/login/?next=/scheduler/")
    page.fill("#id_username", "guest")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    assert "/admin/login/" in page.url  # the admin itself refuses a user who is not staff
    assert page.request.get(site + "/scheduler/", max_redirects=0).status == 302


def test_the_admin_lists_the_jobs_and_pauses_them_as_the_user(
    page: Any, site: str, pg_dsn: str, schema: str
) -> None:
    page.goto(site + "/admin/pgsched/job/")
    page.fill("#id_username", "boss")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/pgsched/job/")
    row = page.locator("#result_list tr", has_text="restock")
    assert row.locator(".next-plan").inner_text().strip()  # its next plan, from the core
    assert page.locator("#result_list tr", has_text="settle").count() == 1
    row.locator("input[type=checkbox]").check()
    page.select_option("#pgsched-action", "pause")
    page.click("#pgsched-jobs button[type=submit]")
    assert "Pause: 1 of 1 job(s) done" in page.locator(".messagelist").inner_text()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        paused = conn.execute(
            sql.SQL("SELECT paused FROM {} WHERE job_name = 'restock'").format(
                sql.Identifier(schema, "job_state")
            )
        ).fetchone()
        recorded = conn.execute(
            sql.SQL("SELECT actor, surface, action FROM {} ORDER BY id DESC LIMIT 1").format(
                sql.Identifier(schema, "actions")
            )
        ).fetchone()
    assert paused == (True,)
    assert recorded == ("boss", "django_admin", "pause")
    assert "paused" in page.locator("#result_list tr", has_text="restock").inner_text()


def test_the_admin_s_jobs_need_the_view_permission(page: Any, site: str) -> None:
    page.goto(site + "/admin/login/?next=/admin/")
    page.fill("#id_username", "clerk")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url("**/admin/")
    assert page.request.get(site + "/admin/pgsched/job/").status == 403
