"""Who may read and act on the dashboard and the API: tokens, the session cookie, the Host and
Origin checks, relative times,
where an action may send the browser back to, and escaping in the HTML helpers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from pgsched._facades.http.auth import Hosts, Tokens, fingerprint, identify, session_cookie
from pgsched._facades.http.html import href, relative, table
from pgsched._facades.http.web import _safe_back

pytestmark = pytest.mark.unit
BOTH = Tokens("op-secret", "view-secret", "ops")


def test_tokens_give_roles_and_labels_never_the_token() -> None:
    operator = identify(BOTH, {"authorization": "Bearer op-secret"})
    assert operator.role == "operator" and operator.may_act and not operator.by_cookie
    assert operator.actor == f"ops #{fingerprint('op-secret')}" and "secret" not in operator.actor
    viewer = identify(BOTH, {"authorization": "Bearer view-secret"})
    assert viewer.role == "viewer" and not viewer.may_act and viewer.may_read(BOTH)
    assert BOTH.actor("viewer") == viewer.actor
    stranger = identify(BOTH, {"authorization": "Bearer nope"})
    assert stranger.role is None and not stranger.may_read(BOTH)
    assert identify(Tokens("op", None), {}).may_read(Tokens("op", None))  # no viewer token
    assert not identify(Tokens(None, None), {"authorization": "Bearer "}).may_act


def test_session_cookie_is_httponly_samesite_strict_scoped_and_expiring() -> None:
    cookie = session_cookie("abc_-1", "/ops/", secure=True, max_age=43200)
    assert cookie.startswith("pgsched_session=abc_-1;")
    for flag in ("Path=/ops/", "HttpOnly", "SameSite=Strict", "Secure", "Max-Age=43200"):
        assert flag in cookie


@pytest.mark.parametrize(
    ("headers", "local", "allowed", "refused"),
    [
        ({"host": "127.0.0.1:1", "origin": "http://127.0.0.1:1"}, "127.0.0.1:1", (), False),
        ({"host": "localhost:1", "origin": "http://localhost:1"}, "127.0.0.1:1", (), False),
        ({"host": "127.0.0.1:1", "referer": "http://127.0.0.1:1/job"}, "127.0.0.1:1", (), False),
        # DNS rebinding: the page's own name, resolving here, names itself in both headers.
        ({"host": "evil:1", "origin": "http://evil:1"}, "127.0.0.1:1", (), True),
        ({"host": "127.0.0.1:1", "origin": "http://evil:1"}, "127.0.0.1:1", (), True),
        ({"host": "127.0.0.1:1", "origin": "null"}, "127.0.0.1:1", (), True),
        ({"host": "127.0.0.1:1"}, "127.0.0.1:1", (), True),
        ({"host": "127.0.0.1:2", "origin": "http://127.0.0.1:2"}, "127.0.0.1:1", (), True),
        (
            {"host": "ops.example", "origin": "https://ops.example"},
            "10.0.0.5:80",
            ("https://ops.example",),
            False,
        ),
        (
            {"host": "ops.example:8443", "origin": "https://ops.example:8443"},
            "",
            ("ops.example",),
            False,
        ),
        (
            {"host": "ops.example:8443", "origin": "https://ops.example:8443"},
            "",
            ("ops.example:9000",),
            True,
        ),
        ({"host": "[::1]:5", "origin": "http://[::1]:5"}, "[::1]:5", (), False),
    ],
)
def test_a_browsers_post_must_name_this_dashboard_in_host_and_origin(
    headers: dict[str, str], local: str, allowed: tuple[str, ...], refused: bool
) -> None:
    assert (Hosts.of(allowed).trusted(headers, local, posted=True) is not None) is refused


def test_allowed_hosts_come_from_the_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGSCHED_HTTP_ALLOWED_HOSTS", "a.example, https://b.example:8443")
    hosts = Hosts.of(None)
    assert hosts.allows("a.example:9465", "127.0.0.1:9465")
    assert hosts.allows("b.example:8443", "")
    assert not hosts.allows("c.example:9465", "127.0.0.1:9465")
    assert hosts.trusted({"host": "c.example"}, "", posted=False) is not None


def test_relative_times() -> None:
    now = datetime(2026, 12, 1, 21, 14, 3, tzinfo=UTC)
    assert relative(now - timedelta(minutes=3, seconds=10), now) == "3 min ago"
    assert relative(now + timedelta(hours=2), now) == "in 2 h"
    assert relative(now - timedelta(seconds=2), now) == "just now"
    assert relative(now - timedelta(days=3), now) == "3 d ago"


@pytest.mark.parametrize(
    ("back", "expected"),
    [
        ("job?name=a", "job?name=a"),
        ("./", "./"),
        ("", "./"),
        ("//evil.example/x", "./"),
        ("https://evil.example/", "./"),
        ("/etc", "./"),
        ("login", "./"),
    ],
)
def test_actions_only_send_the_browser_back_to_a_dashboard_page(back: str, expected: str) -> None:
    assert _safe_back(back) == expected


def test_html_helpers_escape_everything() -> None:
    assert "<script>" not in table(["<h>"], [["x"]])
    assert href("job", name='"><script>') == "job?name=%22%3E%3Cscript%3E"
