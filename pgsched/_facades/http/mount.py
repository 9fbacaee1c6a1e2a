"""The dashboard in a web framework: an aiohttp handler (the replica's server, ``pgsched web``,
an aiohttp sub-application) and a plain ASGI application (FastAPI, Starlette, any ASGI
server). Neither needs more than aiohttp, which pgsched depends on; ASGI needs no library."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl

from aiohttp import web

from ..._operations.core import Operations
from .auth import Tokens
from .web import Dashboard, WebRequest

_MAX_FORM = 1 << 20  # bytes: a bulk action's selection fits many times over
ASGIScope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def _form(body: bytes) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for key, value in parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True):
        out.setdefault(key, []).append(value)
    return out


def address(sockname: Any) -> str:
    """``host:port`` of a socket address (``[v6]:port``), "" when it has none (a Unix one)."""
    if not isinstance(sockname, (tuple, list)) or len(sockname) < 2:
        return ""
    host = str(sockname[0])
    return f"[{host}]:{sockname[1]}" if ":" in host else f"{host}:{sockname[1]}"


def aiohttp_handler(dashboard: Dashboard) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A handler for the dashboard's routes: ``/{tail:.*}`` under a prefix, or its pages."""

    async def handle(request: web.Request) -> web.Response:
        tail = request.match_info.get("tail")
        rest = "/" + (tail if tail is not None else request.path.lstrip("/"))
        root = request.path[: len(request.path) - len(rest)] + "/"
        body = await request.content.read(_MAX_FORM) if request.method == "POST" else b""
        req = WebRequest(
            method=request.method,
            path=rest,
            query={k: request.query.get(k, "") for k in request.query},
            form=_form(body),
            headers={k.lower(): v for k, v in request.headers.items()},
            cookies=dict(request.cookies),
            root=root,
            secure=request.secure,
            remote=request.remote or "",
            local=address(request.transport.get_extra_info("sockname"))
            if request.transport
            else "",
        )
        answer = await dashboard.handle(req)
        response = web.Response(status=answer.status, text=answer.body or None)
        if answer.body:
            response.content_type = "text/html"
            response.charset = "utf-8"
        for name, value in answer.headers:
            response.headers.add(name, value)
        return response

    return handle


def aiohttp_app(
    ops: Operations,
    *,
    tokens: Tokens | None = None,
    allowed_hosts: Sequence[str] | str | None = None,
) -> web.Application:
    """The dashboard as an aiohttp application, to mount with ``app.add_subapp("/ops/", it)``;
    ``allowed_hosts``: the names (or public origins) browsers reach it by, beyond the address
    the server listens on."""
    app = web.Application()
    handler = aiohttp_handler(Dashboard(ops, tokens=tokens, allowed_hosts=allowed_hosts))
    app.router.add_route("GET", "/{tail:.*}", handler)
    app.router.add_route("POST", "/{tail:.*}", handler)
    return app


class ASGIDashboard:
    """The dashboard as an ASGI application: ``fastapi_app.mount("/ops", it)``."""

    def __init__(
        self,
        ops: Operations,
        *,
        tokens: Tokens | None = None,
        allowed_hosts: Sequence[str] | str | None = None,
    ) -> None:
        self.dashboard = Dashboard(ops, tokens=tokens, allowed_hosts=allowed_hosts)

    async def __call__(self, scope: ASGIScope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        answer = await self.dashboard.handle(await _request(scope, receive))
        headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
        body = answer.body.encode()
        if body:
            headers.append((b"content-type", answer.content_type.encode()))
        headers.append((b"content-length", str(len(body)).encode()))
        await send({"type": "http.response.start", "status": answer.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


async def _request(scope: ASGIScope, receive: Receive) -> WebRequest:
    path, root_path = scope["path"], scope.get("root_path", "")
    # Starlette keeps the full path and names the mount in root_path; older servers strip it.
    rest = path[len(root_path) :] if root_path and path.startswith(root_path) else path
    body = b""
    while scope["method"] == "POST" and len(body) <= _MAX_FORM:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    jar: SimpleCookie = SimpleCookie()
    jar.load(headers.get("cookie", ""))
    query = dict(parse_qsl(scope.get("query_string", b"").decode("utf-8", "replace")))
    return WebRequest(
        method=scope["method"],
        path=rest or "/",
        query=query,
        form=_form(body),
        headers=headers,
        cookies={k: m.value for k, m in jar.items()},
        root=(root_path.rstrip("/") + "/"),
        secure=scope.get("scheme") == "https",
        remote=str((scope.get("client") or ("",))[0]),
        local=address(scope.get("server")),
    )


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
