"""The dashboard mounted in the application's own web app, over real HTTP: under ``/ops`` in
FastAPI (ASGI, served by uvicorn) and as an aiohttp sub-application. Links are relative, the
session cookie is scoped to the mount, the app's public origin is allowed, and actions work
there as on a replica."""

from __future__ import annotations

import hashlib
import http.client
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.dashboard.conftest import OPERATOR, Site
from tests.support.net import free_port
from tests.support.replica import clean_env
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

FASTAPI_APP = textwrap.dedent(
    """
    import os, sys
    import uvicorn
    from fastapi import FastAPI
    import pgsched

    admin = pgsched.AsyncAdmin(os.environ["PGSCHED_DSN"], os.environ["PGSCHED_SCHEMA"])
    app = FastAPI()

    @app.get("/hello")
    def hello():
        return {"ok": True}

    app.mount("/ops", pgsched.dashboard_asgi(admin, allowed_hosts=["https://ops.example.com"]))
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
    """
)

AIOHTTP_APP = textwrap.dedent(
    """
    import os, sys
    from aiohttp import web
    import pgsched

    admin = pgsched.AsyncAdmin(os.environ["PGSCHED_DSN"], os.environ["PGSCHED_SCHEMA"])
    app = web.Application()
    app.add_subapp("/ops/", pgsched.dashboard_aiohttp(admin, allowed_hosts="https://ops.example.com"))
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
    """
)


def _call(port: int, method: str, path: str, **options: Any) -> http.client.HTTPResponse:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    conn.request(method, path, **options)
    resp = conn.getresponse()
    resp.read()
    return resp


def _text(port: int, path: str, cookie: str = "", host: str = "") -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    headers = {"Cookie": cookie} if cookie else {}
    if host:
        headers["Host"] = host
    conn.request("GET", path, headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read().decode()


def _up(port: int) -> bool:
    try:
        return _text(port, "/ops/")[0] == 200
    except OSError:
        return False


@pytest.mark.parametrize("framework", ["fastapi", "aiohttp"])
def test_mounted_dashboard_reads_signs_in_and_acts(
    framework: str, site: Site, tmp_path: Path
) -> None:
    import subprocess

    script = tmp_path / "web_app.py"
    script.write_text(FASTAPI_APP if framework == "fastapi" else AIOHTTP_APP)
    port = free_port()
    env = clean_env(
        {"PGSCHED_DSN": site.dsn, "PGSCHED_SCHEMA": site.schema, "PGSCHED_HTTP_TOKEN": OPERATOR}
    )
    log = (tmp_path / "app.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, str(script), str(port)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: _up(port) or proc.poll() is not None, 30, f"{framework} app")
        assert proc.poll() is None, (tmp_path / "app.log").read_text()
        status, page = _text(port, "/ops/")
        assert status == 200 and 'href="job?name=fanout"' in page
        status, page = _text(port, "/ops/job?name=fanout")
        assert status == 200 and page.count('class="scope"') == 51  # the header and 50 rows
        origin = {
            "Origin": f"http://127.0.0.1:{port}",
            "Content-Type": "application/x-www-form-urlencoded",
        }
        signed = _call(port, "POST", "/ops/login", body=f"token={OPERATOR}&back=./", headers=origin)
        assert signed.status == 303, signed.status
        cookie = signed.headers["Set-Cookie"]
        assert "Path=/ops/" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        jar = cookie.split(";", 1)[0]
        ident = jar.split("=", 1)[1]
        assert jar.startswith("pgsched_session=") and OPERATOR not in cookie
        digest = hashlib.sha256(ident.encode()).digest()
        role = site.one("SELECT role FROM {s}.dashboard_sessions WHERE id_hash = %s", (digest,))
        assert role == "operator"
        # The app's public origin is allowed; a name of an attacker's is not (DNS rebinding).
        status, page = _text(port, "/ops/", jar, host="ops.example.com")
        assert status == 200 and "signed in: operator" in page
        assert _text(port, "/ops/", jar, host=f"evil.example:{port}")[0] == 403
        refused = _call(
            port,
            "POST",
            "/ops/action",
            body="action=pause&job=fanout&back=./",
            headers={**origin, "Origin": "http://evil.example", "Cookie": jar},
        )
        assert refused.status == 403
        done = _call(
            port,
            "POST",
            "/ops/action",
            body="action=pause&job=fanout&back=./",
            headers={**origin, "Cookie": jar},
        )
        assert done.status == 303 and "done=" in done.headers["Location"]
        assert site.one("SELECT paused FROM {s}.job_state WHERE job_name = 'fanout'")
        _call(
            port,
            "POST",
            "/ops/action",
            body="action=resume&job=fanout&back=./",
            headers={**origin, "Cookie": jar},
        )
        assert not site.one("SELECT paused FROM {s}.job_state WHERE job_name = 'fanout'")
        if framework == "fastapi":
            assert _text(port, "/hello")[1] == '{"ok":true}'  # the app's own routes stay
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()
