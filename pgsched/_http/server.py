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
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from structlog.typing import FilteringBoundLogger

from .._errors import ConfigError, FieldError, NotFoundError, PgschedError
from .._metrics import Metrics
from .._model import Scope
from .._operations.core import MAX_LIMIT, DriverError, Operations
from .._results import describe_error
from .._times import parse_time
from .auth import Tokens, identify
from .mount import aiohttp_handler
from .schedules import ScheduleRoutes
from .web import Dashboard

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_T = TypeVar("_T")
_DB_TIMEOUT = 5.0
_REFUSED_WAIT = 1.0


class Health(Protocol):
    """What the probes read of the engine."""

    runner_id: str
    tick_interval: float
    last_tick_at: float | None
    started_at: float

    def failing(self) -> dict[str, float]: ...

    def not_writable(self) -> str | None: ...


class HttpServer:
    """Serves one replica's endpoints until :meth:`stop`."""

    def __init__(
        self, *, ops: Operations, health: Health, metrics: Metrics, log: FilteringBoundLogger
    ) -> None:
        self._ops, self._health = ops, health
        self._metrics, self._log = metrics, log
        self._runner: web.AppRunner | None = None
        app = web.Application(middlewares=[self._errors])
        app.add_routes(
            [
                web.get("/metrics", self.metrics),
                web.get("/healthz", self.healthz),
                web.get("/readyz", self.readyz),
                web.get("/api/jobs", self.api_jobs),
                web.get("/api/runs", self.api_runs),
                web.get("/api/runs/{id}", self.api_run),
                web.get("/api/replicas", self.api_replicas),
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
        try:
            return await handler(request)
        except web.HTTPException:
            raise
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

    # -- metrics and probes -------------------------------------------------------------

    async def metrics(self, request: web.Request) -> web.Response:
        # The database gauges come from the registry's collector (cached for a few seconds,
        # so N scrapes a second are not N queries); here the scrape waits for a due refresh.
        await self._metrics.cluster.refresh()
        body = generate_latest(self._metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(self, request: web.Request) -> web.Response:
        """200 while the tick loop is alive (it ticked, successfully or not, recently) and
        neither it nor the writer has kept failing for longer than the health timeout (a
        restart may then help: a replica stuck on a server that is gone, say)."""
        now = time.monotonic()
        last = self._health.last_tick_at
        allowed = max(3 * self._health.tick_interval, 10.0)
        age = None if last is None else now - last
        # Before its first tick has ended, the loop counts from the replica's start.
        ticking = now - (last or self._health.started_at) <= allowed + _DB_TIMEOUT * 2
        failing = [
            {
                "task": task,
                "failing_since": _wall(since, now),
                "failing_for_s": round(now - since, 1),
            }
            for task, since in sorted(self._health.failing().items())
        ]
        alive = ticking and not failing
        body = {
            "alive": alive,
            "last_tick_age_s": None if age is None else round(age, 3),
            "failing": failing,
        }
        return _json(body, 200 if alive else 503)

    async def readyz(self, request: web.Request) -> web.Response:
        """200 when the database answers, takes writes and the schema is migrated. After the
        pool refused a read-only server, a probe waits briefly: a connection lent now has
        passed the pool's check, so the server takes writes again."""
        refused = self._health.not_writable()
        try:
            async with asyncio.timeout(_REFUSED_WAIT if refused else _DB_TIMEOUT):
                migrated = await self._ops.is_migrated()
        except (DriverError, TimeoutError) as exc:
            why = f"database not writable: {refused}" if refused else describe_error(exc)
            return _json({"ready": False, "reason": why}, 503)
        if not migrated:
            return _json(
                {"ready": False, "reason": "schema not migrated: run pgsched migrate"}, 503
            )
        return _json({"ready": True}, 200)

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
        try:
            limit = int(query.get("limit", "50"))
        except ValueError:
            raise ConfigError(
                f"limit={query.get('limit')!r} must be an integer between 1 and {MAX_LIMIT}"
            ) from None
        scope = _scope_param(query.get("scope"))
        since = parse_time(query["since"], "since") if query.get("since") else None
        until = parse_time(query["until"], "until") if query.get("until") else None
        action = self._ops.runs(
            query.get("job"), query.get("status"), limit, scope=scope, since=since, until=until
        )
        runs = await self._db(action)
        return _json({"runs": [r.to_json() for r in runs]}, 200)

    async def api_run(self, request: web.Request) -> web.Response:
        self._may_read(request)
        found = await self._db(self._ops.run(request.match_info["id"]))
        return _json(found.to_json(), 200)

    # -- write API ----------------------------------------------------------------------

    def _may_read(self, request: web.Request) -> None:
        """Reads need the viewer (or operator) token when ``PGSCHED_HTTP_VIEW_TOKEN`` is set."""
        tokens = Tokens.from_env()
        if not identify(tokens, _headers(request), {}).may_read(tokens):
            raise web.HTTPUnauthorized(
                text=json.dumps({"error": "missing or wrong bearer token (viewer token set)"}),
                content_type="application/json",
                headers={"WWW-Authenticate": "Bearer"},
            )

    def _authorise(self, request: web.Request) -> str:
        """The label of the operator token the request carries, for the action log."""
        tokens = Tokens.from_env()
        if tokens.operator is None:
            raise web.HTTPForbidden(
                text=json.dumps({"error": "the write API is off: set PGSCHED_HTTP_TOKEN"}),
                content_type="application/json",
            )
        caller = identify(tokens, _headers(request), {})
        if not caller.may_act:
            raise web.HTTPUnauthorized(
                text=json.dumps({"error": "missing or wrong bearer token"}),
                content_type="application/json",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return caller.actor

    async def api_trigger(self, request: web.Request) -> web.Response:
        actor = self._authorise(request)
        job = request.match_info["job"]
        body = await _body(request)
        unknown = sorted(set(body) - set(_TRIGGER_FIELDS))
        if unknown:
            raise ConfigError(f"job {job!r}: unknown field {unknown[0]!r}")
        scope = Scope.parse(str(body["scope"])) if body.get("scope") else None
        at = parse_time(str(body["at"]), "at") if body.get("at") else None
        every = body.get("all_scopes", False)
        if not isinstance(every, bool):
            raise ConfigError(f"job {job!r}: all_scopes={every!r} must be true or false")
        act = self._ops.action_log.act
        if every:
            every_scope = self._ops.trigger(job, scope, at, all_scopes=True)
            rows = await self._db(act(actor, "trigger", job, "all scopes", every_scope))
            created = any(r.created for r in rows)
            return _json({"runs": [r.to_json() for r in rows]}, 201 if created else 200)
        target = None if scope is None else str(scope)
        done = await self._db(act(actor, "trigger", job, target, self._ops.trigger(job, scope, at)))
        return _json(done.to_json(), 201 if done.created else 200)

    async def api_pause(self, request: web.Request) -> web.Response:
        actor = self._authorise(request)
        job = request.match_info["job"]
        await self._db(self._ops.action_log.act(actor, "pause", job, None, self._ops.pause(job)))
        return _json({"job": job, "paused": True}, 200)

    async def api_resume(self, request: web.Request) -> web.Response:
        actor = self._authorise(request)
        job = request.match_info["job"]
        await self._db(self._ops.action_log.act(actor, "resume", job, None, self._ops.resume(job)))
        return _json({"job": job, "paused": False}, 200)

    async def api_cancel(self, request: web.Request) -> web.Response:
        actor = self._authorise(request)
        ident = request.match_info["id"]
        await self._db(
            self._ops.action_log.act(actor, "cancel", None, ident, self._ops.cancel(ident))
        )
        return _json({"id": ident, "status": "CANCELLED"}, 200)

    async def api_retry(self, request: web.Request) -> web.Response:
        actor = self._authorise(request)
        ident = request.match_info["id"]
        work = self._ops.retry_now(ident)
        job = await self._db(self._ops.action_log.act(actor, "retry", None, ident, work))
        return _json({"id": ident, "job": job, "retry": "now"}, 200)


def api_field(name: str, value: object) -> str:
    """A field of an operation as this API's JSON body field: ``"all_scopes": true``."""
    shown = value if isinstance(value, bool | int | float) else str(value)
    return f"{json.dumps(name)}: {json.dumps(shown)}"


def _headers(request: web.Request) -> dict[str, str]:
    return {k.lower(): v for k, v in request.headers.items()}


def _scope_param(text: str | None) -> Scope | None:
    if not text:
        return None
    kind, sep, ident = text.partition(":")
    if not sep or not kind or not ident:
        raise ConfigError(f"scope={text!r} is not of the form KIND:ID")
    return Scope(kind, ident)


_TRIGGER_FIELDS = ("scope", "at", "all_scopes")


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


def _wall(monotonic: float, now: float) -> str:
    """The UTC wall-clock time of the monotonic instant ``monotonic`` (``now`` on that clock)."""
    return datetime.fromtimestamp(time.time() - (now - monotonic), UTC).isoformat()


def _json(body: Any, status: int) -> web.Response:
    return web.Response(
        text=json.dumps(body, default=str), status=status, content_type="application/json"
    )
