"""``pgsched web``: the dashboard alone, against the database (no jobs run), until SIGTERM or
SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from aiohttp import web

from .._aio import AsyncAdmin
from .._errors import PgschedError
from .._http.mount import aiohttp_app
from .common import configured_dsn


def add_web_command(sub: Any) -> None:
    p = sub.add_parser("web", help="serve the dashboard (no jobs run) until SIGTERM")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=9465, help="port (default 9465; 0 picks one)")
    p.set_defaults(command=_web)


def _web(args: argparse.Namespace) -> int:
    dsn = configured_dsn(args.dsn)
    return asyncio.run(_serve(dsn, args.schema or "pgsched", args.host, args.port))


async def _serve(dsn: str, schema: str, host: str, port: int) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with AsyncAdmin(dsn, schema, app_name="pgsched web") as admin:
        if not await admin.is_migrated():
            raise PgschedError(f"schema {schema!r} is not migrated: run `pgsched migrate`")
        runner = web.AppRunner(aiohttp_app(admin), access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:
            await runner.cleanup()
            raise PgschedError(f"cannot serve HTTP on {host}:{port}: {exc.strerror}") from None
        bound = runner.addresses[0][1] if runner.addresses else port
        print(f"pgsched web: the dashboard is on http://{host}:{bound}/", flush=True)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()
    return 0
