"""The test Django project (tests/django_project) on each test's own schema: ``manage.py``
as a subprocess, its replicas as ``manage.py pgsched run``, the project served over real HTTP
(``manage.py runserver`` or uvicorn) to Debian's Chromium."""

from __future__ import annotations

import contextlib
import http.client
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from tests.support.browser import CHROMIUM, CHROMIUM_ARGS
from tests.support.net import free_port
from tests.support.replica import Replica, clean_env
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[3]
PROJECT = REPO / "tests" / "django_project"
PASSWORD = "django-db-pw-7f3a"  # the server trusts local connections: any password works


@dataclass
class Project:
    """The test project on the test's schema: ``manage.py ARGS`` runs and what they print."""

    env: dict[str, str]
    marks: Path

    def manage(self, *args: str, settings: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if settings is not None:
            env["DJANGO_SETTINGS_MODULE"] = f"site_settings.{settings}"
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=PROJECT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def ok(self, *args: str) -> str:
        done = self.manage(*args)
        assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}{done.stderr}"
        assert PASSWORD not in done.stdout + done.stderr
        return done.stdout


@pytest.fixture
def project(pg_dsn: str, schema: str, tmp_path: Path) -> Iterator[Project]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        # Django's tables go there too (search_path in the project's OPTIONS).
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = clean_env(
        {
            "PGSCHED_TEST_DSN": pg_dsn,
            "PGSCHED_TEST_SCHEMA": schema,
            "PGSCHED_TEST_PASSWORD": PASSWORD,
            "SHOP_MARKS": str(tmp_path / "marks"),
            "PYTHONPATH": path,  # this checkout's pgsched, whatever the virtualenv has
        }
    )
    env.pop("DJANGO_SETTINGS_MODULE", None)
    yield Project(env, tmp_path / "marks")


def tables_of(pg_dsn: str, schema: str) -> list[str]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        names = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
            (schema,),
        ).fetchall()
    return [n for (n,) in names]


def start_replica(project: Project, name: str, log_dir: Path, **env: str) -> Replica:
    """``manage.py pgsched run`` as replica ``name``, with ``env`` added to the project's."""
    return Replica(
        ["pgsched", "run", "--runner-id", name, "--http-port", "0"],
        cwd=PROJECT,
        env={**project.env, **env},
        name=name,
        log=log_dir / f"{name}.log",
        program=("manage.py",),
    )


# The site's users: a superuser, a staff user with no permission of pgsched's, a user who is
# not staff.
USER_PASSWORD = "boss-pw-31d5"
USERS = f"""
from django.contrib.auth.models import User
User.objects.create_superuser("boss", "boss@example.com", "{USER_PASSWORD}")
User.objects.create_user("clerk", password="{USER_PASSWORD}", is_staff=True)
User.objects.create_user("guest", password="{USER_PASSWORD}")
"""
SERVERS: dict[str, Callable[[int], list[str]]] = {
    "wsgi": lambda port: [
        sys.executable,
        "manage.py",
        "runserver",
        f"127.0.0.1:{port}",
        "--noreload",
    ],
    "asgi": lambda port: [
        sys.executable,
        "-m",
        "uvicorn",
        "site_settings.asgi:application",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ],
}


@contextlib.contextmanager
def served(project: Project, tmp_path: Path, server_kind: str) -> Iterator[str]:
    """The project migrated, with its users, served by ``server_kind`` (a key of
    ``SERVERS``), a replica running its jobs: its URL."""
    project.ok("migrate")
    project.ok("shell", "-c", USERS)
    replica = start_replica(project, "shop-1", tmp_path)
    port = free_port()
    log_path = tmp_path / f"{server_kind}.log"
    log = log_path.open("w")
    server = subprocess.Popen(
        SERVERS[server_kind](port), cwd=PROJECT, env=project.env, stdout=log, stderr=log
    )
    try:
        wait_until(lambda: _answers(port, server, log_path), 60, "the server")
        replica.wait_sigterm_handled()  # so that stopping it is a clean shutdown
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(20)
        log.close()
        assert replica.stop() == 0, replica.output()[-3000:]


def _answers(port: int, server: subprocess.Popen[bytes], log: Path) -> bool:
    assert server.poll() is None, log.read_text()[-3000:]
    try:
        status, _ = http_get(port, "/scheduler/")
    except OSError:
        return False
    return status == 302


def http_get(port: int, path: str) -> tuple[int, str]:
    """``GET path`` with no session: the status and the Location header."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        answer = conn.getresponse()
        return answer.status, answer.getheader("Location") or ""
    finally:
        conn.close()


@contextlib.contextmanager
def browser_page() -> Iterator[Any]:
    """A page of a Chromium of its own."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))
        try:
            yield browser.new_page()
        finally:
            browser.close()


def sign_in(page: Any, url: str, user: str) -> None:
    """Open ``url``, which sends to Django's admin login, and sign in as ``user``."""
    page.goto(url)
    assert "/login/" in page.url
    page.fill("#id_username", user)
    page.fill("#id_password", USER_PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(lambda current: "/login/" not in current)
