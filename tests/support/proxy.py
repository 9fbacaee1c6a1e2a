"""A small TCP proxy for fault injection: one listening port on 127.0.0.1 forwarding to one
upstream (a loopback TCP port, or a server's Unix socket), in a thread and event loop of its
own. It can add latency in each direction, or blackhole: stop forwarding both ways and stop
answering new connections while keeping every socket open (what a host that vanished, or a
partition, looks like to a client: no RST, no FIN); healing lets the buffered bytes flow.
It can also blackhole itself right after forwarding a chosen chunk to the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any


class TcpProxy:
    """``127.0.0.1:port`` forwarding to ``upstream``: a TCP port on 127.0.0.1 (an ``int``)
    or a Unix socket path (a ``str``)."""

    def __init__(self, upstream: int | str, name: str = "proxy") -> None:
        self.upstream = upstream
        self.latency_s = 0.0  # added in each direction
        self.connections = 0
        # Blackhole right after forwarding upstream a chunk that contains the bytes given.
        self._cut_on: tuple[bytes, threading.Event] | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()
        self._open: asyncio.Event = self._call(asyncio.Event)
        self._call(self._open.set)
        self._server: asyncio.Server = self._call(
            lambda: asyncio.start_server(self._serve, "127.0.0.1", 0)
        )
        self.port = int(self._server.sockets[0].getsockname()[1])

    def _call(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` (awaiting what it returns, if a coroutine) on the proxy's loop."""

        async def run() -> Any:
            value = fn()
            return await value if asyncio.iscoroutine(value) else value

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def set_latency(self, seconds: float) -> None:
        """Delay every chunk by ``seconds`` in each direction (0 to stop)."""
        self._call(lambda: setattr(self, "latency_s", seconds))

    def blackhole(self, on: bool) -> None:
        """Stop (``on``) or resume forwarding, without closing anything."""
        self._call(self._open.clear if on else self._open.set)

    def cut_on(self, needle: bytes) -> threading.Event:
        """Blackhole right after forwarding to the server a chunk that contains ``needle``
        (a statement's parameter, say); the event is set when that happened."""
        hit = threading.Event()
        self._call(lambda: setattr(self, "_cut_on", (needle, hit)))
        return hit

    async def _connect_upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if isinstance(self.upstream, str):
            return await asyncio.open_unix_connection(self.upstream)
        return await asyncio.open_connection("127.0.0.1", self.upstream)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.connections += 1
        up: asyncio.StreamWriter | None = None
        try:
            await self._open.wait()  # a blackholed proxy does not even reach the server
            up_reader, up = await self._connect_upstream()
            self._writers.add(up)
            await asyncio.gather(
                self._pump(reader, up, upstream=True), self._pump(up_reader, writer)
            )
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (writer, up):
                if w is not None:
                    self._writers.discard(w)
                    with contextlib.suppress(Exception):
                        w.close()

    async def _deliver(
        self,
        queue: asyncio.Queue[tuple[float, bytes]],
        writer: asyncio.StreamWriter,
        upstream: bool,
    ) -> None:
        """Write what ``queue`` holds once each chunk is due and the proxy is open."""
        loop = asyncio.get_running_loop()
        while True:
            due, data = await queue.get()
            trigger = self._cut_on if upstream else None
            delay = due - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await self._open.wait()
            if not data:  # EOF: pass it on (after whatever was pending)
                with contextlib.suppress(Exception):
                    writer.write_eof()
                return
            writer.write(data)
            await writer.drain()
            if trigger is not None and self._cut_on is trigger and trigger[0] in data:
                self._open.clear()
                self._cut_on = None
                trigger[1].set()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, upstream: bool = False
    ) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()
        task = asyncio.ensure_future(self._deliver(queue, writer, upstream))
        last = 0.0
        try:
            while True:
                data = await reader.read(65536)
                last = max(last, loop.time() + self.latency_s)  # keep the byte order
                queue.put_nowait((last, data))
                if not data:
                    break
            await task
        except (OSError, asyncio.IncompleteReadError):
            with contextlib.suppress(Exception):
                writer.close()
        finally:
            if not task.done():
                task.cancel()

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            self._open.set()
            self._server.close()
            for w in list(self._writers):
                with contextlib.suppress(Exception):
                    w.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self._call(shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()
