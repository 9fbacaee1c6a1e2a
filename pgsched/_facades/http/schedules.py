"""The HTTP API of schedules as data (docs/schedules.md) under ``/api/jobs/{job}/schedules``:
a facade that translates requests into calls of the operations core and its typed values into
JSON.
Writes need the bearer token (checked by the server's ``authorise``); a ``ConfigError``
becomes 400 with its message, an unknown job or schedule 404 (the server's middleware).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ..._errors import ConfigError, NotFoundError
from ..._operations.core import Operations
from ..._operations.requests import ScheduleRequest
from ..._structures import Scope

Authorise = Callable[[web.Request], Operations]  # the core acting as the caller
Body = Callable[[web.Request], Awaitable[dict[str, Any]]]
Reply = Callable[[Any, int], web.Response]
_BASE = "/api/jobs/{job}/schedules"


class ScheduleRoutes:
    """The schedule endpoints of one replica's HTTP server."""

    def __init__(
        self,
        ops: Operations,
        *,
        db: Callable[[Awaitable[Any]], Awaitable[Any]],
        authorise: Authorise,
        may_read: Callable[[web.Request], None],
        body: Body,
        reply: Reply,
    ) -> None:
        self._ops, self._db, self._authorise = ops, db, authorise
        self._may_read = may_read
        self._body, self._reply = body, reply

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(_BASE, self.list),
            web.get(_BASE + "/{scope}", self.get),
            web.put(_BASE + "/{scope}", self.put),
            web.delete(_BASE + "/{scope}", self.delete),
            web.post(_BASE + "/{scope}/pause", self.pause),
            web.post(_BASE + "/{scope}/resume", self.resume),
        ]

    async def list(self, request: web.Request) -> web.Response:
        self._may_read(request)
        job, query = request.match_info["job"], request.query
        after = Scope.parse(query["after"]) if query.get("after") else None
        text = query.get("limit", "100")
        try:
            limit = int(text)
        except ValueError:
            raise ConfigError(f"limit={text!r} must be an integer from 1 to 1000") from None
        page = await self._db(self._ops.list_schedules(job, after=after, limit=limit))
        return self._reply({"schedules": [s.to_json() for s in page]}, 200)

    async def get(self, request: web.Request) -> web.Response:
        self._may_read(request)
        job, scope = _target(request)
        found = await self._db(self._ops.get_schedule(job, scope))
        if found is None:
            raise NotFoundError(f"job {job!r}, scope {scope}: no such schedule")
        return self._reply(found.to_json(), 200)

    async def put(self, request: web.Request) -> web.Response:
        ops = self._authorise(request)
        body = await self._body(request)
        path = {"job": request.match_info["job"], "scope": request.match_info["scope"]}
        put = await self._db(ScheduleRequest.parse(body, fixed=path).send(ops))
        return self._reply(put.to_json(), 200)

    async def delete(self, request: web.Request) -> web.Response:
        ops = self._authorise(request)
        job, scope = _target(request)
        if not await self._db(ops.delete_schedule(job, scope)):
            raise NotFoundError(f"job {job!r}, scope {scope}: no such schedule")
        return self._reply({"job": job, "scope": _scope_json(scope), "deleted": True}, 200)

    async def pause(self, request: web.Request) -> web.Response:
        return await self._set_paused(request, True)

    async def resume(self, request: web.Request) -> web.Response:
        return await self._set_paused(request, False)

    async def _set_paused(self, request: web.Request, paused: bool) -> web.Response:
        ops = self._authorise(request)
        job, scope = _target(request)
        action = ops.pause_schedule if paused else ops.resume_schedule
        await self._db(action(job, scope))
        return self._reply({"job": job, "scope": _scope_json(scope), "paused": paused}, 200)


def _target(request: web.Request) -> tuple[str, Scope]:
    job = request.match_info["job"]
    return job, Scope.parse(request.match_info["scope"], job)


def _scope_json(scope: Scope) -> dict[str, str]:
    return {"kind": scope.kind, "id": scope.id}
