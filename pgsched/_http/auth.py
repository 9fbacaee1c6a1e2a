"""Who may read and act, for the dashboard and the JSON API.

Tokens: the operator token (``PGSCHED_HTTP_TOKEN``) may act and read; the viewer token
(``PGSCHED_HTTP_VIEW_TOKEN``), when set, is needed to read. A browser holds its token in an
HttpOnly, SameSite=Strict cookie set by the login form; API clients send ``Authorization:
Bearer``. A write carried by the cookie must also come from the dashboard's own origin (its
``Origin``, or failing that ``Referer``, names the request's host): SameSite stops most
cross-site posts, the origin check the rest. Actions are recorded under the token's label and
a short fingerprint of it, never the token itself.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

COOKIE = "pgsched_token"
COOKIE_AGE_S = 12 * 3600


@dataclass(frozen=True, slots=True)
class Tokens:
    """The configured tokens (None: not set); from the environment unless given."""

    operator: str | None
    viewer: str | None
    label: str = "operator"

    @classmethod
    def from_env(cls, operator: str | None = None, viewer: str | None = None) -> Tokens:
        return cls(
            operator or os.environ.get("PGSCHED_HTTP_TOKEN") or None,
            viewer or os.environ.get("PGSCHED_HTTP_VIEW_TOKEN") or None,
            os.environ.get("PGSCHED_HTTP_TOKEN_LABEL") or "operator",
        )


@dataclass(frozen=True, slots=True)
class Caller:
    """What a request may do: ``role`` is ``operator``, ``viewer`` or None (no valid token),
    ``by_cookie`` whether its token came in the cookie."""

    role: str | None
    by_cookie: bool
    actor: str  # the label actions are recorded under

    def may_read(self, tokens: Tokens) -> bool:
        return tokens.viewer is None or self.role is not None

    @property
    def may_act(self) -> bool:
        return self.role == "operator"


def identify(tokens: Tokens, headers: Mapping[str, str], cookies: Mapping[str, str]) -> Caller:
    """The caller of a request with these (lower-cased) headers and cookies."""
    bearer = headers.get("authorization", "")
    given, by_cookie = None, False
    if bearer.lower().startswith("bearer "):
        given = bearer[7:]
    elif cookies.get(COOKIE):
        given, by_cookie = unquote(cookies[COOKIE]), True
    if given is None:
        return Caller(None, False, "anonymous")
    if tokens.operator is not None and _same(given, tokens.operator):
        return Caller("operator", by_cookie, f"{tokens.label} #{fingerprint(given)}")
    if tokens.viewer is not None and _same(given, tokens.viewer):
        return Caller("viewer", by_cookie, f"viewer #{fingerprint(given)}")
    return Caller(None, by_cookie, "anonymous")


def caller_name(label: str, remote: str | None) -> str:
    """A caller as the action log names it: its token's label and its address."""
    return f"{label} from {remote}" if remote else label


def fingerprint(token: str) -> str:
    """Eight hex digits naming a token in the action log (not enough to guess it)."""
    return hashlib.sha256(token.encode()).hexdigest()[:8]


def same_origin(headers: Mapping[str, str]) -> bool:
    """Whether a browser's write comes from a page of this host (Origin, else Referer)."""
    host = headers.get("host", "")
    source = headers.get("origin") or headers.get("referer") or ""
    if not host or not source or source == "null":
        return False
    return urlsplit(source).netloc.lower() == host.lower()


def login_cookie(token: str, path: str, secure: bool) -> str:
    flags = f"; Path={path}; Max-Age={COOKIE_AGE_S}; HttpOnly; SameSite=Strict"
    return f"{COOKIE}={quote(token, safe='')}{flags}{'; Secure' if secure else ''}"


def logout_cookie(path: str) -> str:
    return f"{COOKIE}=; Path={path}; Max-Age=0; HttpOnly; SameSite=Strict"


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())
