"""Signing in over real HTTP: a random session id in the cookie (never the token), kept in the
database so that a second server (``pgsched web`` next to the replica, as behind one load
balancer) knows it, ended by sign-out; and a browser's request naming another host (DNS
rebinding) or posted from another origin is refused whatever its cookie."""

from __future__ import annotations

import hashlib
import http.client
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import psycopg
import pytest
from psycopg import sql

from tests.support.replica import Replica, clean_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

OPERATOR = f"op-{uuid.uuid4().hex}"
APP = textwrap.dedent(
    """
    import pgsched
    scheduler = pgsched.Scheduler(tick_interval="0.5s")

    @scheduler.job(every="1h")
    def hourly(run):
        return 1
    """
)


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    text: str


def request(
    port: int,
    method: str,
    path: str,
    *,
    host: str | None = None,
    origin: str | None = None,
    cookie: str | None = None,
    form: dict[str, str] | None = None,
) -> Answer:
    """One request to 127.0.0.1:``port`` with these Host, Origin and cookie (no redirect
    followed: the sign-in's Set-Cookie is on its 303)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    headers = {"Host": host or f"127.0.0.1:{port}"}
    if origin is not None:
        headers["Origin"] = origin
    if cookie is not None:
        headers["Cookie"] = f"pgsched_session={cookie}"
    body = None
    if form is not None:
        body = urlencode(form)
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        return Answer(resp.status, resp.headers, resp.read().decode())
    finally:
        conn.close()


@dataclass
class Servers:
    replica: int  # the replica's port
    web: int  # `pgsched web`'s, with ops.example allowed
    conn: psycopg.Connection[Any]
    schema: str

    def q(self, text: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cur = self.conn.execute(sql.SQL(text).format(s=sql.Identifier(self.schema)), params)
        return cur.fetchall() if cur.description else []

    def sign_in(self, port: int) -> str:
        own = f"http://127.0.0.1:{port}"
        answer = request(port, "POST", "/login", origin=own, form={"token": OPERATOR})
        assert answer.status == 303, answer.text
        cookie = answer.headers["Set-Cookie"]
        assert cookie.startswith("pgsched_session=")
        return cookie.split(";")[0].split("=", 1)[1]


def _web_port(web: Replica) -> int:
    for line in web.output().splitlines():
        if "the dashboard is on " in line:
            return int(line.rstrip("/").rsplit(":", 1)[1])
    assert web.alive, web.output()
    return 0


@pytest.fixture(scope="module")
def servers(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    work: Path = tmp_path_factory.mktemp("sessions")
    schema = f"t_sess_{uuid.uuid4().hex[:10]}"
    (work / "app.py").write_text(APP)
    env = clean_env(
        {"PGSCHED_DSN": pg_dsn, "PGSCHED_SCHEMA": schema, "PGSCHED_HTTP_TOKEN": OPERATOR}
    )
    subprocess.run(
        [sys.executable, "-m", "pgsched", "migrate"], env=env, check=True, capture_output=True
    )
    replica = Replica.run("app.py", "sessions", cwd=work, env=env)
    web = Replica(
        ["web", "--http-port", "0"],
        cwd=work,
        env={**env, "PGSCHED_HTTP_ALLOWED_HOSTS": "ops.example"},
        name="web",
    )
    conn = psycopg.connect(pg_dsn, autocommit=True)
    try:
        port = replica.http_port()
        web_port = wait_until(lambda: _web_port(web), 30, "pgsched web's address")
        yield Servers(port, web_port, conn, schema)
    finally:
        for proc in (web, replica):
            proc.stop(30)
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.close()


def test_a_session_is_a_random_id_in_the_database_known_to_every_server(
    servers: Servers,
) -> None:
    servers.q("DELETE FROM {s}.dashboard_sessions")
    servers.q(
        "INSERT INTO {s}.dashboard_sessions (id_hash, role, actor, created_at, expires_at)"
        " VALUES ('\\x00', 'viewer', 'viewer #0', now() - interval '13 hours',"
        " now() - interval '1 hour')"
    )
    own = f"http://127.0.0.1:{servers.replica}"
    answer = request(servers.replica, "POST", "/login", origin=own, form={"token": OPERATOR})
    assert answer.status == 303, answer.text
    cookie = answer.headers["Set-Cookie"]
    for flag in ("HttpOnly", "SameSite=Strict", "Max-Age=43200", "Path=/"):
        assert flag in cookie, cookie
    ident = cookie.split(";")[0].split("=", 1)[1]
    assert OPERATOR not in cookie and len(ident) >= 40
    rows = servers.q("SELECT id_hash, role, expires_at - created_at FROM {s}.dashboard_sessions")
    # Only the id's sha256 is stored, with its role and 12 h end; the expired row is gone.
    assert rows == [(hashlib.sha256(ident.encode()).digest(), "operator", timedelta(hours=12))]

    # The other server (another process, as another replica behind one load balancer).
    page = request(servers.web, "GET", "/", cookie=ident)
    assert page.status == 200 and "signed in: operator" in page.text
    forged = request(servers.web, "GET", "/", cookie=OPERATOR)  # the token is no cookie
    assert "signed in" not in forged.text

    web_own = f"http://127.0.0.1:{servers.web}"
    out = request(servers.web, "POST", "/logout", origin=web_own, cookie=ident)
    assert out.status == 303 and "Max-Age=0" in out.headers["Set-Cookie"]
    assert servers.q("SELECT count(*) FROM {s}.dashboard_sessions") == [(0,)]
    after = request(servers.replica, "GET", "/", cookie=ident)
    assert after.status == 200 and "signed in" not in after.text


def test_another_host_or_origin_is_refused_whatever_the_cookie(servers: Servers) -> None:
    ident = servers.sign_in(servers.replica)
    port = servers.replica
    evil = f"evil.example:{port}"
    pause = {"action": "pause", "job": "hourly", "back": "./"}
    # DNS rebinding: the attacker's name resolves to this server; the browser's headers
    # name the attacker's page in both Host and Origin.
    read = request(port, "GET", "/", host=evil, cookie=ident)
    assert read.status == 403 and "evil.example" in read.text
    posted = request(
        port, "POST", "/action", host=evil, origin=f"http://{evil}", cookie=ident, form=pause
    )
    assert posted.status == 403
    foreign = request(
        port, "POST", "/action", origin="http://evil.example", cookie=ident, form=pause
    )
    assert foreign.status == 403
    login = request(
        port, "POST", "/login", host=evil, origin=f"http://{evil}", form={"token": OPERATOR}
    )
    assert login.status == 403 and "Set-Cookie" not in login.headers
    assert servers.q("SELECT count(*) FROM {s}.actions") == [(0,)]
    assert servers.q("SELECT paused FROM {s}.job_state") == [(False,)]

    # The server's own address, and a name the operator allows (pgsched web's ops.example).
    done = request(
        port, "POST", "/action", origin=f"http://127.0.0.1:{port}", cookie=ident, form=pause
    )
    assert done.status == 303 and "done=" in done.headers["Location"]
    assert servers.q("SELECT paused FROM {s}.job_state") == [(True,)]
    allowed = f"ops.example:{servers.web}"
    resume = {**pause, "action": "resume"}
    kept = request(
        servers.web,
        "POST",
        "/action",
        host=allowed,
        origin=f"http://{allowed}",
        cookie=ident,
        form=resume,
    )
    assert kept.status == 303 and "done=" in kept.headers["Location"]
    assert servers.q("SELECT paused FROM {s}.job_state") == [(False,)]
