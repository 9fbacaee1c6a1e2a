"""The replica's HTTP server: metrics, probes, the status page and the JSON API.

The README's "HTTP and metrics" lists the paths, the metrics and what each answers.

A facade: it translates requests into calls of the operations core (``_operations``) on the
replica's pool and the core's typed values into JSON or HTML. Write endpoints need
``Authorization: Bearer $PGSCHED_HTTP_TOKEN`` and are refused (403) when no token is set.
"""

from __future__ import annotations

import asyncio
import errno
import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web
from structlog.typing import FilteringBoundLogger

from ..._errors import ConfigError, FieldError, NotFoundError, PgschedError, describe_error
from ..._operations.audit import Actor, acting
from ..._operations.core import DriverError, Operations
from ..._operations.requests import ExplainQuery, RunsQuery, TriggerRequest, field_names
from ..._telemetry.metrics import Metrics
from .auth import Tokens, caller_name, identify
from .mount import aiohttp_handler
from .probes import Health, Probes, json_response
from .schedules import ScheduleRoutes
from .web import Dashboard

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_T = TypeVar("_T")
_DB_TIMEOUT = 5.0
_RUNS_LIMIT = 50  # runs a GET /api/runs without a limit answers
# The query parameters each GET endpoint of the API takes (any other is refused, 400).
_QUERY = {
    "/api/jobs": (),
    "/api/runs": field_names(RunsQuery),
    "/api/runs/{id}": (),
    "/api/replicas": (),
    "/api/jobs/{job}/schedules": ("after", "limit"),
    "/api/jobs/{job}/schedules/{scope}": (),
}


class HttpServer:
    """Serves one replica's endpoints until :meth:`stop`."""

    def __init__(
        self, *, ops: Operations, health: Health, metrics: Metrics, log: FilteringBoundLogger
    ) -> None:
        self._ops, self._health = ops, health
        self._metrics, self._log = metrics, log
        self._runner: web.AppRunner | None = None
        app = web.Application(middlewares=[self._errors])
        probes = Probes(ops, health, metrics.registry, metrics.cluster)
        app.add_routes(probes.routes())
        app.add_routes(
            [
                web.get("/api/jobs", self.api_jobs),
                web.get("/api/runs", self.api_runs),
                web.get("/api/runs/{id}", self.api_run),
                web.get("/api/replicas", self.api_replicas),
                web.get("/api/jobs/{job}/explain", self.api_explain),
                web.post("/api/jobs/{job}/trigger", self.api_trigger),
                web.post("/api/jobs/{job}/pause", self.api_pause),
                web.post("/api/jobs/{job}/resume", self.api_resume),
                web.post("/api/runs/{id}/cancel", self.api_cancel),
                web.post("/api/runs/{id}/retry", self.api_retry),
            ]
        )
        schedules = ScheduleRoutes(
            ops,
            db=self._db,
            authorise=self._authorise,
            may_read=self._may_read,
            body=_body,
            reply=_json,
        )
        app.add_routes(schedules.routes())
        dashboard = aiohttp_handler(Dashboard(ops, runner_id=health.runner_id))
        for path in ("/", "/job", "/schedules", "/run", "/login"):
            app.router.add_get(path, dashboard)
        for path in ("/login", "/logout", "/action"):
            app.router.add_post(path, dashboard)
        self.app = app

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0 picks a free port); returns the bound port."""
        self._runner = web.AppRunner(self.app, access_log=None)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, host, port).start()
        except OSError as exc:
            await self._runner.cleanup()
            if exc.errno != errno.EADDRINUSE:
                raise PgschedError(f"cannot serve HTTP on {host}:{port}: {exc.strerror}") from exc
            raise PgschedError(
                f"HTTP port {port} on {host} is already in use (another pgsched run?): choose"
                " another with --http-port (0 picks a free one) or serve none with --no-http"
            ) from None
        # The listening socket tells the port when 0 was asked for.
        addresses = self._runner.addresses
        return int(addresses[0][1]) if addresses else port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _db(self, action: Awaitable[_T]) -> _T:
        """``action`` (an operation of the core), bounded so a slow database cannot pile up
        requests."""
        async with asyncio.timeout(_DB_TIMEOUT):
            return await action

    @web.middleware
    async def _errors(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        api = request.path.startswith("/api/")
        try:
            if api and request.method in ("GET", "HEAD"):
                _known_query(request)
            return await handler(request)
        except web.HTTPException as exc:
            if not api or exc.content_type == "application/json":
                raise
            # aiohttp's own answers (404, 405, 413...) are plain text: the API's are JSON.
            reply = _json(
                {"error": f"{exc.status} {exc.reason}: {request.method} {request.path}"}, exc.status
            )
            for name in ("Allow", "WWW-Authenticate"):
                if name in exc.headers:
                    reply.headers[name] = exc.headers[name]
            return reply
        except NotFoundError as exc:
            return _json({"error": str(exc)}, 404)
        except FieldError as exc:
            return _json({"error": exc.worded(api_field)}, 400)
        except ConfigError as exc:
            return _json({"error": str(exc)}, 400)
        except PgschedError as exc:
            return _json({"error": str(exc)}, 409)
        except (DriverError, TimeoutError) as exc:
            return _json({"error": f"database unavailable: {describe_error(exc)}"}, 503)

    # -- read-only views ----------------------------------------------------------------

    async def api_jobs(self, request: web.Request) -> web.Response:
        self._may_read(request)
        summary = await self._db(self._ops.status())
        return _json({"jobs": [j.to_json() for j in summary]}, 200)

    async def api_replicas(self, request: web.Request) -> web.Response:
        self._may_read(request)
        replicas = await self._db(self._ops.replicas())
        return _json({"replicas": [r.to_json() for r in replicas]}, 200)

    async def api_runs(self, request: web.Request) -> web.Response:
        self._may_read(request)
        query = request.query
        fields = {**query, "limit": query.get("limit") or str(_RUNS_LIMIT)}
        runs = await self._db(RunsQuery.parse(fields).send(self._ops))
        return _json({"runs": [r.to_json() for r in runs]}, 200)

    async def api_explain(self, request: web.Request) -> web.Response:
        """``explain`` of the job, with the command line's options as query parameters."""
        self._may_read(request)
        given, job = dict(request.query), request.match_info["job"]
        query = ExplainQuery.parse(given, fixed={"job": job})
        answer = await self._db(query.send(self._ops))
        return _json(answer.to_json(), 200)

    async def api_run(self, request: web.Request) -> web.Response:
        self._may_read(request)
        found = await self._db(self._ops.run(request.match_info["id"]))
        return _json(found.to_json(), 200)

    # -- write API ----------------------------------------------------------------------

    def _may_read(self, request: web.Request) -> None:
        """Reads need the viewer (or operator) token when ``PGSCHED_HTTP_VIEW_TOKEN`` is set."""
        tokens = Tokens.from_env()
        if not identify(tokens, _headers(request)).may_read(tokens):
            raise web.HTTPUnauthorized(
                text=json.dumps({"error": "missing or wrong bearer token (viewer token set)"}),
                content_type="application/json",
                headers={"WWW-Authenticate": "Bearer"},
            )

    def _authorise(self, request: web.Request) -> Operations:
        """The operations core acting as the request's caller (surface ``http``: its token's
        label and address in the action log); refused without the operator token."""
        tokens = Tokens.from_env()
        if tokens.operator is None:
            raise web.HTTPForbidden(
                text=json.dumps({"error": "the write API is off: set PGSCHED_HTTP_TOKEN"}),
                content_type="application/json",
            )
        caller = identify(tokens, _headers(request))
        if not caller.may_act:
            raise web.HTTPUnauthorized(
                text=json.dumps({"error": "missing or wrong bearer token"}),
                content_type="application/json",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return acting(self._ops, Actor("http", caller_name(caller.actor, request.remote)))

    async def api_trigger(self, request: web.Request) -> web.Response:
        ops = self._authorise(request)
        body = await _body(request)
        trigger = TriggerRequest.parse(body, fixed={"job": request.match_info["job"]})
        rows = await self._db(trigger.send(ops))
        created = 201 if any(r.created for r in rows) else 200
        if trigger.all_scopes:
            return _json({"runs": [r.to_json() for r in rows]}, created)
        return _json(rows[0].to_json(), created)

    async def api_pause(self, request: web.Request) -> web.Response:
        ops = self._authorise(request)
        job = request.match_info["job"]
        await self._db(ops.pause(job))
        return _json({"job": job, "paused": True}, 200)

    async def api_resume(self, request: web.Request) -> web.Response:
        ops = self._authorise(request)
        job = request.match_info["job"]
        await self._db(ops.resume(job))
        return _json({"job": job, "paused": False}, 200)

    async def api_cancel(self, request: web.Request) -> web.Response:
        ops = self._authorise(request)
        ident = request.match_info["id"]
        await self._db(ops.cancel(ident))
        return _json({"id": ident, "status": "CANCELLED"}, 200)

    async def api_retry(self, request: web.Request) -> web.Response:
        ops = self._authorise(request)
        ident = request.match_info["id"]
        job = await self._db(ops.retry_now(ident))
        return _json({"id": ident, "job": job, "retry": "now"}, 200)


def api_field(name: str, value: object) -> str:
    """A field of an operation as this API's JSON body field: ``"all_scopes": true``."""
    shown = value if isinstance(value, bool | int | float) else str(value)
    return f"{json.dumps(name)}: {json.dumps(shown)}"


def _headers(request: web.Request) -> dict[str, str]:
    return {k.lower(): v for k, v in request.headers.items()}


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        body = await request.json()
    except ValueError:
        raise ConfigError("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise ConfigError("the request body must be a JSON object")
    return body


_json = json_response


def _known_query(request: web.Request) -> None:
    """Refuse a query parameter the endpoint does not take (a typo must not widen a read)."""
    info = request.match_info
    route = getattr(info, "route", None)
    canonical = route.resource.canonical if route is not None and route.resource else None
    taken = _QUERY.get(canonical or "")
    if taken is None:
        return
    unknown = sorted(set(request.query) - set(taken))
    if unknown:
        known = ", ".join(taken) if taken else "none"
        raise ConfigError(
            f"{request.path}: unknown query parameter {unknown[0]!r} (it takes: {known})"
        )
