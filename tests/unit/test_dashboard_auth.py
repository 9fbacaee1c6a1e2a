"""Who may read and act on the dashboard and the API: tokens, the cookie, the origin check,
where an action may send the browser back to, and escaping in the HTML helpers."""

from __future__ import annotations

import pytest

from pgsched._http.auth import Tokens, fingerprint, identify, login_cookie, same_origin
from pgsched._http.html import href, table
from pgsched._http.web import _safe_back

pytestmark = pytest.mark.unit
BOTH = Tokens("op-secret", "view-secret", "ops")


def test_tokens_give_roles_and_labels_never_the_token() -> None:
    operator = identify(BOTH, {"authorization": "Bearer op-secret"}, {})
    assert operator.role == "operator" and operator.may_act and not operator.by_cookie
    assert operator.actor == f"ops #{fingerprint('op-secret')}" and "secret" not in operator.actor
    viewer = identify(BOTH, {}, {"pgsched_token": "view-secret"})
    assert viewer.role == "viewer" and not viewer.may_act and viewer.by_cookie
    assert viewer.may_read(BOTH)
    stranger = identify(BOTH, {"authorization": "Bearer nope"}, {})
    assert stranger.role is None and not stranger.may_read(BOTH)
    assert identify(Tokens("op", None), {}, {}).may_read(Tokens("op", None))  # no viewer token
    assert not identify(Tokens(None, None), {"authorization": "Bearer "}, {}).may_act


def test_cookie_is_httponly_samesite_strict_and_scoped() -> None:
    cookie = login_cookie("a b;c", "/ops/", secure=True)
    assert cookie.startswith("pgsched_token=a%20b%3Bc;")
    for flag in ("Path=/ops/", "HttpOnly", "SameSite=Strict", "Secure"):
        assert flag in cookie


@pytest.mark.parametrize(
    ("headers", "ok"),
    [
        ({"host": "h:1", "origin": "http://h:1"}, True),
        ({"host": "h:1", "referer": "http://h:1/job?name=x"}, True),
        ({"host": "h:1", "origin": "http://evil:1"}, False),
        ({"host": "h:1", "origin": "null"}, False),
        ({"host": "h:1"}, False),
    ],
)
def test_origin_check(headers: dict[str, str], ok: bool) -> None:
    assert same_origin(headers) is ok


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
