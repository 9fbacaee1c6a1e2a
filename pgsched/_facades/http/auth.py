"""Who may read and act, for the dashboard and the JSON API, and which browsers' requests the
dashboard answers.

Tokens: the operator token (``PGSCHED_HTTP_TOKEN``) may act and read; the viewer token
(``PGSCHED_HTTP_VIEW_TOKEN``), when set, is needed to read. API clients send
``Authorization: Bearer``. A browser signs in with a token to a session (the operations core
keeps it in the database, so every replica behind one load balancer knows it): its cookie
holds the session's random id, HttpOnly and SameSite=Strict, never the token. Actions are
recorded under the token's label and a short fingerprint of it, never the token itself.

Hosts: a browser's request carried by the cookie, and every sign-in, sign-out and posted
action, must name in ``Host`` (and a post in ``Origin``, failing that ``Referer``) an address
this dashboard answers to: the address the request came in on (the server's bound
host:port; ``localhost`` as well for a loopback one) or one the operator allows
(``PGSCHED_HTTP_ALLOWED_HOSTS``, or the mount's ``allowed_hosts``). A page of another name
resolving to this server (DNS rebinding) or of another site is refused.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

COOKIE = "pgsched_session"
ALLOWED_HOSTS_ENV = "PGSCHED_HTTP_ALLOWED_HOSTS"


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

    def actor(self, role: str) -> str | None:
        """The label the holder of ``role``'s token acts under now (None: no such token).
        A session records it at sign-in: once the token changes, the session is void."""
        if role == "operator" and self.operator is not None:
            return f"{self.label} #{fingerprint(self.operator)}"
        if role == "viewer" and self.viewer is not None:
            return f"viewer #{fingerprint(self.viewer)}"
        return None


@dataclass(frozen=True, slots=True)
class Caller:
    """What a request may do: ``role`` is ``operator``, ``viewer`` or None (no valid token),
    ``by_cookie`` whether it came with the session cookie; ``external`` when the web
    framework the dashboard is mounted in signed the user in (Django's), not a token."""

    role: str | None
    by_cookie: bool
    actor: str  # the label actions are recorded under
    external: bool = False

    def may_read(self, tokens: Tokens) -> bool:
        return tokens.viewer is None or self.role is not None

    @property
    def may_act(self) -> bool:
        return self.role == "operator"


ANONYMOUS = Caller(None, False, "anonymous")


def identify(tokens: Tokens, headers: Mapping[str, str]) -> Caller:
    """The caller of a request with these (lower-cased) headers by its bearer token."""
    bearer = headers.get("authorization", "")
    if not bearer.lower().startswith("bearer "):
        return ANONYMOUS
    return by_token(tokens, bearer[7:])


def by_token(tokens: Tokens, given: str) -> Caller:
    """The caller holding the token ``given``."""
    if tokens.operator is not None and _same(given, tokens.operator):
        return Caller("operator", False, tokens.actor("operator") or "")
    if tokens.viewer is not None and _same(given, tokens.viewer):
        return Caller("viewer", False, tokens.actor("viewer") or "")
    return ANONYMOUS


def caller_name(label: str, remote: str | None) -> str:
    """A caller as the action log names it: its token's label and its address."""
    return f"{label} from {remote}" if remote else label


def fingerprint(token: str) -> str:
    """Eight hex digits naming a token in the action log (not enough to guess it)."""
    return hashlib.sha256(token.encode()).hexdigest()[:8]


@dataclass(frozen=True, slots=True)
class Hosts:
    """The ``host[:port]`` names this dashboard answers to beyond the address a request came
    in on: the operator's (``PGSCHED_HTTP_ALLOWED_HOSTS``, comma-separated; each a host, a
    host:port or an origin such as ``https://ops.example.com``; a host without a port
    allows it on any port)."""

    allowed: tuple[str, ...] = ()

    @classmethod
    def of(cls, names: Iterable[str] | str | None) -> Hosts:
        given = names.split(",") if isinstance(names, str) else list(names or ())
        env = (os.environ.get(ALLOWED_HOSTS_ENV) or "").split(",")
        return cls(tuple(n for n in (_name(x) for x in [*given, *env]) if n))

    def allows(self, name: str, local: str) -> bool:
        """Whether ``name`` (a Host header or an origin's netloc, port included unless the
        default) is the local address ``local`` (``host:port``) or one allowed."""
        name = name.strip().lower()
        if not name:
            return False
        if local and name in _local_names(local):
            return True
        return any(_matches(a, name) for a in self.allowed)

    def trusted(self, headers: Mapping[str, str], local: str, *, posted: bool) -> str | None:
        """Why a browser's request with these headers is refused (None: it is not): its Host
        is unknown, or (``posted``) its Origin (else Referer) is missing or not allowed."""
        host = headers.get("host", "")
        if not self.allows(host, local):
            return (
                f"Host {host!r} is not an address this dashboard answers to"
                f" (add it to {ALLOWED_HOSTS_ENV})"
            )
        if not posted:
            return None
        source = headers.get("origin") or headers.get("referer") or ""
        if not source or source == "null":
            return "the form did not come from this page (no Origin)"
        parts = urlsplit(source)
        if not self.allows(_with_port(parts.netloc, parts.scheme), local):
            return f"the form did not come from this page (Origin {source!r})"
        return None


def _name(text: str) -> str:
    text = text.strip().lower()
    if "://" in text:
        parts = urlsplit(text)
        return _with_port(parts.netloc, parts.scheme) if parts.netloc else ""
    return text.rstrip("/")


def _with_port(netloc: str, scheme: str) -> str:
    """``netloc`` as a browser sends it in Host (a default port left out)."""
    netloc = netloc.lower()
    default = {"http": ":80", "https": ":443"}.get(scheme)
    return netloc[: -len(default)] if default and netloc.endswith(default) else netloc


def _matches(allowed: str, name: str) -> bool:
    """An allowed ``host:port`` names exactly that; an allowed host, that host on any port."""
    if ":" in allowed.rsplit("]", 1)[-1]:
        return allowed == name
    return allowed == _host_of(name)


def _host_of(name: str) -> str:
    if name.startswith("["):
        return name.split("]")[0] + "]"
    return name.rsplit(":", 1)[0] if ":" in name else name


def _local_names(local: str) -> set[str]:
    """How a browser names the address ``local`` in Host: itself, and ``localhost`` for a
    loopback one (port 80 left out)."""
    host, _, port = local.rpartition(":")
    host = host.strip("[]")
    names = {f"[{host}]" if ":" in host else host}
    try:
        if ipaddress.ip_address(host).is_loopback:
            names.add("localhost")
    except ValueError:
        pass
    out = {f"{n}:{port}" for n in names}
    if port == "80":
        out |= names
    return out


def session_cookie(ident: str, path: str, secure: bool, max_age: int) -> str:
    flags = f"; Path={path}; Max-Age={max_age}; HttpOnly; SameSite=Strict"
    return f"{COOKIE}={ident}{flags}{'; Secure' if secure else ''}"


def cleared_cookie(path: str) -> str:
    return f"{COOKIE}=; Path={path}; Max-Age=0; HttpOnly; SameSite=Strict"


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())
