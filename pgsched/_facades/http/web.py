"""The dashboard, independent of any web framework: a request in (method, path under the
dashboard's root, query, form, headers, cookies), a response out. ``mount`` adapts it to
aiohttp (the replica's server, ``pgsched web``, an aiohttp sub-application) and to ASGI
(FastAPI, Starlette). Every page lives at the root's top level, so links are relative and
the dashboard works under any prefix.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar
from urllib.parse import urlencode, urlsplit

from ..._errors import ConfigError, NotFoundError, PgschedError, describe_error
from ..._operations.audit import Actor
from ..._operations.core import DriverError, Operations
from ..._operations.sessions import SESSION_LIFETIME
from ..._structures import Scope
from ..._times import parse_time
from . import pages
from .actions import ActionForm, one, question
from .auth import (
    ANONYMOUS,
    COOKIE,
    Caller,
    Hosts,
    Tokens,
    by_token,
    caller_name,
    cleared_cookie,
    identify,
    session_cookie,
)
from .html import SCRIPT_HASH, esc, frame
from .jobpage import JobView, job_page, schedules_page

_T = TypeVar("_T")
_DB_TIMEOUT = 10.0
_PAGES = ("", "job", "schedules", "run")
_REFRESH_S = 30


@dataclass(frozen=True, slots=True)
class WebRequest:
    method: str
    path: str  # under the dashboard's root: "/", "/job", ...
    query: Mapping[str, str]
    form: Mapping[str, Sequence[str]]
    headers: Mapping[str, str]  # names lower-cased
    cookies: Mapping[str, str]
    root: str  # the root's absolute path, ending in "/" (the cookie's path)
    secure: bool = False
    remote: str = ""  # the caller's address, for the action log
    local: str = ""  # host:port the request came in on (the server's bound address)
    # Who the framework the dashboard is mounted in has signed in (Django: a staff user, an
    # operator with the permission to act): then no token or session of the dashboard's own.
    caller: Caller | None = None


@dataclass(slots=True)
class WebResponse:
    status: int
    body: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    content_type: str = "text/html; charset=utf-8"


class Dashboard:
    """Serves the dashboard's pages and actions over the operations core ``ops``."""

    def __init__(
        self,
        ops: Operations,
        *,
        tokens: Tokens | None = None,
        runner_id: str | None = None,
        allowed_hosts: Sequence[str] | str | None = None,
    ) -> None:
        self._ops, self._fixed, self._runner_id = ops, tokens, runner_id
        self._allowed = allowed_hosts

    @property
    def hosts(self) -> Hosts:
        return Hosts.of(self._allowed)  # the environment's part read per request, as tokens

    @property
    def tokens(self) -> Tokens:
        # Read per request unless given: the environment is the operator's to change.
        return self._fixed or Tokens.from_env()

    async def handle(self, req: WebRequest) -> WebResponse:
        tokens, caller = self.tokens, ANONYMOUS
        try:
            caller = await self._caller(req, tokens)
            return await self._route(req, tokens, caller)
        except NotFoundError as exc:
            return self._page(
                req, caller, "Not found", pages.message_page("Not found", str(exc)), 404
            )
        except ConfigError as exc:
            return self._page(
                req, caller, "Bad request", pages.message_page("Bad request", str(exc)), 400
            )
        except (DriverError, TimeoutError) as exc:
            text = f"database unavailable: {describe_error(exc)}"
            return self._page(
                req, caller, "Unavailable", pages.message_page("Unavailable", text), 503
            )

    async def _caller(self, req: WebRequest, tokens: Tokens) -> Caller:
        """Who sent ``req``: its bearer token, else its session cookie's session (void once
        the token that opened it changed); the framework's user when it signed one in."""
        if req.caller is not None:
            return req.caller
        if req.headers.get("authorization"):
            return identify(tokens, req.headers)
        ident = req.cookies.get(COOKIE)
        if not ident:
            return ANONYMOUS
        found = await self._db(self._ops.sessions.find(ident))
        if found is None or tokens.actor(found.role) != found.actor:
            return Caller(None, True, "anonymous")
        return Caller(found.role, True, found.actor)

    async def _route(self, req: WebRequest, tokens: Tokens, caller: Caller) -> WebResponse:
        name = req.path.strip("/")
        posted = req.method == "POST" and name in ("login", "logout", "action")
        # A browser's request (its cookie, or a form it posts) must name this dashboard:
        # another name resolving here (DNS rebinding) or another site's page is refused.
        if caller.by_cookie or (posted and name != "action"):
            refused = self.hosts.trusted(req.headers, req.local, posted=posted)
            if refused is not None:
                return self._refuse(req, ANONYMOUS, 403, f"refused: {refused}")
        if name in ("login", "logout") and caller.external:
            return _redirect("./")  # signing in and out is the framework's
        if name == "login":
            return await self._login(req, tokens, caller)
        if name == "logout" and req.method == "POST":
            if req.cookies.get(COOKIE):
                await self._db(self._ops.sessions.close(req.cookies[COOKIE]))
            return _redirect("./", [("Set-Cookie", cleared_cookie(req.root))])
        if name == "action" and req.method == "POST":
            return await self._action(req, tokens, caller)
        if name not in _PAGES or req.method not in ("GET", "HEAD"):
            raise NotFoundError(f"no page {req.path!r}")
        if not caller.may_read(tokens):
            body = pages.login_page("Sign in with a token to read this dashboard.", _back(req))
            return self._page(req, caller, "Sign in", body, 401)
        can_act = caller.may_act and (tokens.operator is not None or caller.external)
        if name == "":
            body = await self._overview(can_act)
            return self._page(req, caller, "Overview", body, 200, refresh=refresh_every())
        if name == "job":
            body = await self._job(req, can_act)
            return self._page(req, caller, one_q(req, "name"), body, 200, refresh=refresh_every())
        if name == "schedules":
            return self._page(req, caller, "Schedules", await self._schedules(req, can_act), 200)
        found = await self._db(self._ops.run(one_q(req, "id")))
        body = pages.run_page(found, can_act=can_act, back=_back(req))
        return self._page(req, caller, "Execution", body, 200)

    async def _db(self, action: Awaitable[_T]) -> _T:
        async with asyncio.timeout(_DB_TIMEOUT):
            return await action

    async def _overview(self, can_act: bool) -> str:
        ops = self._ops
        jobs = await self._db(ops.job_overview())
        strips = {j.job: await self._db(ops.plan_history(j.job, limit=20)) for j in jobs}
        running = await self._db(ops.runs(status="RUNNING", limit=200))
        data = pages.Overview(
            jobs=jobs,
            strips=strips,
            replicas=await self._db(ops.replicas()),
            stale=[r for r in running if r.stale],
            failures=await self._db(ops.failed_attempts(limit=10)),
            recent=await self._db(ops.runs(limit=20)),
            actions=await self._db(ops.actions(limit=15)),
            runner_id=self._runner_id,
        )
        return pages.overview(data, can_act=can_act)

    async def _job(self, req: WebRequest, can_act: bool) -> str:
        ops, name, search = self._ops, one_q(req, "name"), req.query.get("q", "")
        status = next((j for j in await self._db(ops.job_overview()) if j.job == name), None)
        if status is None:
            raise NotFoundError(f"unknown job {name!r}")
        after = req.query.get("after")
        before = req.query.get("before")
        grid = ops.job_grid(
            name,
            search=search,
            after=Scope.parse(after) if after else None,
            before=parse_time(before, "before") if before else None,
        )
        view = JobView(
            job=status,
            grid=await self._db(grid),
            history=await self._db(ops.plan_history(name, limit=60)),
            upcoming=await self._db(ops.job_upcoming(name, limit=10)),
            pending=await self._db(ops.job_pending(name, limit=20)),
            failures=await self._db(ops.job_failures(name, limit=20)),
            actions=await self._db(ops.actions(name, limit=15)),
            search=search,
            back=_back(req),
        )
        return job_page(view, can_act=can_act)

    async def _schedules(self, req: WebRequest, can_act: bool) -> str:
        name, search, after = one_q(req, "name"), req.query.get("q", ""), req.query.get("after")
        found = self._ops.schedules_page(
            name, search=search, after=Scope.parse(after) if after else None
        )
        page = await self._db(found)
        return schedules_page(name, page, search=search, back=_back(req), can_act=can_act)

    async def _login(self, req: WebRequest, tokens: Tokens, caller: Caller) -> WebResponse:
        back = _safe_back(req.query.get("back") or one(req.form, "back"))
        if req.method != "POST":
            return self._page(req, caller, "Sign in", pages.login_page("", back), 200)
        signed = by_token(tokens, one(req.form, "token"))
        if signed.role is None:
            return self._page(
                req, caller, "Sign in", pages.login_page("That token is not valid.", back), 401
            )
        ident, _ = await self._db(self._ops.sessions.open(signed.role, signed.actor))
        age = int(SESSION_LIFETIME.total_seconds())
        return _redirect(back, [("Set-Cookie", session_cookie(ident, req.root, req.secure, age))])

    async def _action(self, req: WebRequest, tokens: Tokens, caller: Caller) -> WebResponse:
        back = _safe_back(one(req.form, "back"))
        if caller.external and not caller.may_act:
            return self._refuse(req, caller, 403, "your account may not act on jobs")
        if tokens.operator is None and not caller.external:
            return self._refuse(req, caller, 403, "actions are off: set PGSCHED_HTTP_TOKEN")
        if not caller.may_act:
            return self._refuse(req, caller, 401, "sign in with the operator token to act")
        ask = question(req.form) if caller.by_cookie else None
        if ask is not None:  # a browser asks first; a script with its bearer token has decided
            return self._page(req, caller, "Confirm", pages.confirm_page(req.form, ask, back), 200)
        try:
            actor = Actor("dashboard", caller_name(caller.actor, req.remote))
            text = await self._db(ActionForm(self._ops, actor, req.form).run())
        except (PgschedError, ValueError) as exc:
            return _redirect(_with(back, failed=str(exc)))
        return _redirect(_with(back, done=text))

    def _refuse(self, req: WebRequest, caller: Caller, status: int, text: str) -> WebResponse:
        body = pages.message_page("Refused", text)
        if status == 401:
            body += pages.login_page("", _safe_back(one(req.form, "back")))
        return self._page(req, caller, "Refused", body, status)

    def _page(
        self,
        req: WebRequest,
        caller: Caller,
        title: str,
        body: str,
        status: int,
        refresh: int | None = None,
    ) -> WebResponse:
        html = frame(
            title, body, who=_who(caller, self._runner_id), refresh=refresh, flash=_flash(req)
        )
        headers = [
            ("Cache-Control", "no-store"),
            ("X-Frame-Options", "DENY"),
            ("Referrer-Policy", "same-origin"),
            (
                "Content-Security-Policy",
                "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:;"
                f" script-src '{SCRIPT_HASH}'; connect-src 'self';"
                " form-action 'self'; frame-ancestors 'none'",
            ),
        ]
        return WebResponse(status, html, headers)


def refresh_every() -> int:
    """Seconds between a page's refreshes in place: ``PGSCHED_DASHBOARD_REFRESH``, else 30
    (0: never)."""
    text = os.environ.get("PGSCHED_DASHBOARD_REFRESH", "")
    try:
        return max(0, int(text)) if text else _REFRESH_S
    except ValueError:
        return _REFRESH_S


def one_q(req: WebRequest, name: str) -> str:
    value = req.query.get(name, "")
    if not value:
        raise ConfigError(f"the page needs ?{name}=")
    return value


def _who(caller: Caller, runner_id: str | None) -> str:
    where = f"replica {esc(runner_id)} · " if runner_id else ""
    if caller.external:
        return f"{where}signed in: {esc(caller.actor)} ({esc(caller.role)})"
    if caller.role is None:
        return f'{where}<a href="login">Sign in</a>'
    out = (
        '<form class="inline" method="post" action="logout">'
        '<button class="quiet" type="submit">Sign out</button></form>'
    )
    return f"{where}signed in: {esc(caller.role)} {out}"


def _flash(req: WebRequest) -> str:
    if req.query.get("failed"):
        return f'<p class="flash error" role="alert">{esc(req.query["failed"])}</p>'
    if req.query.get("done"):
        return f'<p class="flash" role="status">{esc(req.query["done"])}</p>'
    return ""


def _back(req: WebRequest) -> str:
    """This page, relative, without its flash message: where an action returns to."""
    kept = {k: v for k, v in req.query.items() if k not in ("done", "failed")}
    name = req.path.strip("/") or "."
    return (name if name != "." else "./") + ("?" + urlencode(kept) if kept else "")


def _safe_back(text: str) -> str:
    """``text`` when it is one of the dashboard's own pages (relative), else the overview."""
    parts = urlsplit(text)
    if not text or parts.scheme or parts.netloc or text.startswith(("/", "\\")):
        return "./"
    name = parts.path.lstrip("./")
    return text if name in _PAGES else "./"


def _with(back: str, **message: str) -> str:
    base, _, query = back.partition("?")
    kept = [p for p in query.split("&") if p and not p.startswith(("done=", "failed="))]
    kept.append(urlencode({k: v[:500] for k, v in message.items()}))
    return base + "?" + "&".join(kept)


def _redirect(location: str, headers: list[tuple[str, str]] | None = None) -> WebResponse:
    return WebResponse(303, "", [("Location", location), *(headers or [])])
