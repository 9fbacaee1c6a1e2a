"""pgsched inside a FastAPI application (docs/embedding.md): the replica runs on the application's
event loop for the lifespan of the app, and the endpoints drive the jobs through
``scheduler.aio`` (coroutines: nothing blocks the loop).

    pip install pgsched fastapi uvicorn
    PGSCHED_DSN=postgresql://... uvicorn examples.fastapi_app:app

Every replica of the service runs the same jobs; each plan still runs once. uvicorn turns
SIGTERM into the lifespan's shutdown, which stops the scheduler as ``pgsched run`` would:
no new claims, running handlers finish within ``shutdown_grace``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, HTTPException

import pgsched

scheduler = pgsched.Scheduler(
    schema=os.environ.get("PGSCHED_SCHEMA", "pgsched"),
    tick_interval="0.5s",
    shutdown_grace="10s",
)


@scheduler.job(every="2s")
async def refresh_cache(run: pgsched.Run) -> int:
    run.log.info("cache_refreshed")
    return 1


@scheduler.job(every="1h", scopes=[pgsched.Scope("tenant", t) for t in ("acme", "globex")])
async def tenant_report(run: pgsched.Run) -> None:
    run.log.info("report_built", tenant=run.scope.id)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    await scheduler.aio.migrate()
    serving = asyncio.create_task(scheduler.serve())
    try:
        yield
    finally:
        scheduler.stop()  # as SIGTERM does for `pgsched run`
        await serving


app = FastAPI(lifespan=lifespan)


@app.get("/jobs")
async def jobs() -> list[dict[str, Any]]:
    return [status.to_json() for status in await scheduler.aio.status()]


@app.post("/jobs/{job}/trigger")
async def trigger(job: str, scope: str | None = None) -> dict[str, Any]:
    """``?scope=KIND:ID``: a scoped job (tenant_report) needs one of its scopes."""
    try:
        chosen = pgsched.Scope.parse(scope) if scope else None
        triggered = await scheduler.aio.trigger(job, chosen)
    except pgsched.NotFoundError as exc:
        raise HTTPException(404, str(exc)) from exc
    except pgsched.ConfigError as exc:
        raise HTTPException(400, str(exc)) from exc
    return triggered.to_json()


@app.post("/jobs/{job}/pause")
async def pause(job: str) -> dict[str, str]:
    await scheduler.aio.pause(job)
    return {"job": job, "paused": "true"}


@app.post("/jobs/{job}/resume")
async def resume(job: str) -> dict[str, str]:
    await scheduler.aio.resume(job)
    return {"job": job, "paused": "false"}
