"""``/metrics``, ``/healthz`` and ``/readyz``, the same on a replica's server and on ``pgsched
web``: the registry's metrics with the database gauges refreshed first; whether the loop is
alive (a replica's tick loop; ``pgsched web``'s own heartbeat); whether the database answers,
takes writes and is migrated."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from ..._errors import DatabaseError, describe_error
from ..._operations.core import DriverError, Operations
from ..._telemetry.gauges import ClusterGauges

_DB_TIMEOUT = 5.0
_REFUSED_WAIT = 1.0
# A probe's answer never waits longer than this for the database (Kubernetes' default probe
# timeout is 1 s): a check still running then is answered with the last one's result.
PROBE_ANSWER_S = 0.8


class Health(Protocol):
    """What the probes read of the loop they watch."""

    runner_id: str
    tick_interval: float
    last_tick_at: float | None
    started_at: float

    def failing(self) -> dict[str, float]: ...

    def not_writable(self) -> str | None: ...


class Probes:
    """The three endpoints over ``ops``, ``health``, and ``registry`` whose database gauges
    are ``gauges``."""

    def __init__(
        self,
        ops: Operations,
        health: Health,
        registry: CollectorRegistry,
        gauges: ClusterGauges,
    ) -> None:
        self._ops, self._health = ops, health
        self._registry, self._gauges = registry, gauges
        self._readiness = Readiness(ops, health)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/metrics", self.metrics),
            web.get("/healthz", self.healthz),
            web.get("/readyz", self.readyz),
        ]

    async def metrics(self, request: web.Request) -> web.Response:
        # The database gauges come from the registry's collector (cached for a few seconds,
        # so N scrapes a second are not N queries); here the scrape waits for a due refresh.
        await self._gauges.refresh()
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def healthz(self, request: web.Request) -> web.Response:
        """200 while the loop is alive (it ticked, successfully or not, recently) and
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
        return json_response(body, 200 if alive else 503)

    async def readyz(self, request: web.Request) -> web.Response:
        """200 when the database answers, takes writes and the schema is migrated; answered
        within :data:`PROBE_ANSWER_S` whatever the database does."""
        body, status = await self._readiness.answer()
        return json_response(body, status)


class Readiness:
    """The database's readiness, checked by one task at a time (each bounded by
    ``_DB_TIMEOUT``) that a probe waits for at most :data:`PROBE_ANSWER_S`: past that it is
    answered with the last check's result, or a 503 when there was none. A database that
    stops answering is then reported once the running check's bound ends."""

    def __init__(self, ops: Operations, health: Health) -> None:
        self._ops, self._health = ops, health
        self._last: tuple[dict[str, Any], int] | None = None
        self._check: asyncio.Task[tuple[dict[str, Any], int]] | None = None

    async def answer(self) -> tuple[dict[str, Any], int]:
        if self._check is None or self._check.done():
            self._check = asyncio.create_task(self._checked())
        try:
            return await asyncio.wait_for(asyncio.shield(self._check), PROBE_ANSWER_S)
        except TimeoutError:
            if self._last is not None:
                return self._last
            why = f"the database did not answer within {PROBE_ANSWER_S} s (still waiting)"
            return {"ready": False, "reason": why}, 503

    async def _checked(self) -> tuple[dict[str, Any], int]:
        self._last = result = await self._result()
        return result

    async def _result(self) -> tuple[dict[str, Any], int]:
        """After the pool refused a read-only server, the check waits briefly: a connection
        lent now has passed the pool's check, so the server takes writes again."""
        refused = self._health.not_writable()
        try:
            async with asyncio.timeout(_REFUSED_WAIT if refused else _DB_TIMEOUT):
                migrated = await self._ops.is_migrated()
        except (DriverError, TimeoutError) as exc:
            why = f"database not writable: {refused}" if refused else describe_error(exc)
            return {"ready": False, "reason": why}, 503
        except DatabaseError as exc:  # an AsyncAdmin's connector translates driver errors
            return {"ready": False, "reason": str(exc)}, 503
        except Exception as exc:  # the probe says so rather than the task dying unseen
            return {"ready": False, "reason": describe_error(exc)}, 503
        if not migrated:
            return {"ready": False, "reason": "schema not migrated: run pgsched migrate"}, 503
        return {"ready": True}, 200


class Heartbeat:
    """The :class:`Health` of a process with no tick loop (``pgsched web``): its event loop
    beats every second while it runs; nothing else can fail on its own."""

    tick_interval = 1.0

    def __init__(self, runner_id: str) -> None:
        self.runner_id = runner_id
        self.started_at = time.monotonic()
        self.last_tick_at: float | None = None

    async def run(self) -> None:
        while True:
            self.last_tick_at = time.monotonic()
            await asyncio.sleep(self.tick_interval)

    def failing(self) -> dict[str, float]:
        return {}

    def not_writable(self) -> str | None:
        return None


def _wall(monotonic: float, now: float) -> str:
    """The UTC wall-clock time of the monotonic instant ``monotonic`` (``now`` on that clock)."""
    return datetime.fromtimestamp(time.time() - (now - monotonic), UTC).isoformat()


def json_response(body: Any, status: int) -> web.Response:
    return web.Response(
        text=json.dumps(body, default=str), status=status, content_type="application/json"
    )
