"""What ``pgsched web`` serves: the dashboard at ``/`` and, as on a replica, ``/healthz`` (its
event loop beats), ``/readyz`` (the database answers and is migrated) and ``/metrics`` (the
database gauges, read through the operations core at most every 2 s when scraped)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from aiohttp import web
from prometheus_client import CollectorRegistry

from ..._operations.core import Operations
from ..._telemetry.gauges import ClusterGauges
from .mount import aiohttp_handler
from .probes import Heartbeat, Probes
from .web import Dashboard


def standalone_app(ops: Operations, name: str) -> web.Application:
    """The application of ``pgsched web`` over ``ops``; ``name`` is what it reports as."""
    registry = CollectorRegistry()
    gauges = ClusterGauges(registry)
    heartbeat = Heartbeat(name)
    app = web.Application()
    app.add_routes(Probes(ops, heartbeat, registry, gauges).routes())
    handler = aiohttp_handler(Dashboard(ops))
    app.router.add_route("GET", "/{tail:.*}", handler)
    app.router.add_route("POST", "/{tail:.*}", handler)

    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        beating = asyncio.create_task(heartbeat.run())
        gauges.attach(ops.status, asyncio.get_running_loop(), lambda exc: None)
        try:
            yield
        finally:
            gauges.detach()
            beating.cancel()

    app.cleanup_ctx.append(lifetime)
    return app
