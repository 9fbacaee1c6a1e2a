"""``pgsched web``: the dashboard alone, against the database (no jobs run), with the probes
and the database gauges a replica serves, until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
from typing import Any

from aiohttp import web

from .._errors import PgschedError
from .._facades.aio import AsyncAdmin
from .._facades.http.standalone import standalone_app
from .common import configured_dsn


def add_web_command(sub: Any) -> None:
    p = sub.add_parser("web", help="serve the dashboard (no jobs run) until SIGTERM")
    host = p.add_mutually_exclusive_group()
    host.add_argument("--http-host", dest="host", help="address to bind (default 127.0.0.1)")
    host.add_argument("--host", dest="host", help=argparse.SUPPRESS)  # deprecated alias
    port = p.add_mutually_exclusive_group()
    port.add_argument("--http-port", dest="port", type=int, help="port (default 9465; 0 picks one)")
    port.add_argument(
        "--port", dest="old_port", type=int, help="deprecated: the same as --http-port"
    )
    p.set_defaults(command=_web)


def _web(args: argparse.Namespace) -> int:
    dsn = configured_dsn(args.dsn)
    if args.old_port is not None:
        print("pgsched web: --port is deprecated, use --http-port", file=sys.stderr)
    port = args.port if args.port is not None else args.old_port
    host = args.host or "127.0.0.1"
    return asyncio.run(_serve(dsn, args.schema or "pgsched", host, 9465 if port is None else port))


async def _serve(dsn: str, schema: str, host: str, port: int) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with AsyncAdmin(dsn, schema, app_name="pgsched web") as admin:
        if not await admin.is_migrated():
            raise PgschedError(f"schema {schema!r} is not migrated: run `pgsched migrate`")
        name = f"web-{socket.gethostname()}"
        runner = web.AppRunner(standalone_app(admin, name), access_log=None)
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
