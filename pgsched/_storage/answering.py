"""The client-side bound on every wait for the server's answer. A server behind something
that keeps acknowledging TCP (a proxy, a load balancer, a pooler whose server vanished) looks
alive to keepalives and tcp_user_timeout: only a bound on the wait notices it. A slow server
must not be mistaken for a gone one, so when the bound expires pgsched first asks the host for
a sign of life on a new socket (PostgreSQL's SSLRequest, answered before any authentication);
only a host that does not react then has the connection dropped: its socket shut down, so the
pending read ends at once (psycopg's own cancel would wait on the same silent server).
"""

from __future__ import annotations

import asyncio
import os
import socket
import struct
import threading
import time
from typing import Any, TypeVar

import psycopg
from psycopg.abc import PQGen

# The engine's statements answer in milliseconds; an operator's may run until the server's
# statement_timeout, so theirs is that plus ANSWER_GRACE_S.
ENGINE_ANSWER_TIMEOUT_S = 5.0
ANSWER_GRACE_S = 5.0
# How long a host gets to react to the sign-of-life probe.
PROBE_TIMEOUT_S = 2.0
# SSLRequest: length 8, code 1234.5679; a PostgreSQL server (or PgBouncer) replies one byte.
_SSL_REQUEST = struct.pack("!ii", 8, 80877103)

# How often a sync connection's watcher looks at the wait under way.
_WATCH_EVERY_S = 0.25

_RV = TypeVar("_RV")


class NoAnswer(psycopg.OperationalError):
    """The server did not answer within the connection's ``answer_timeout`` and its host did
    not react to a probe: the connection was dropped."""


def _address(host: str, port: int) -> tuple[int, Any]:
    """Socket family and address of ``host`` (a directory: PostgreSQL's Unix socket)."""
    if host.startswith("/"):
        return socket.AF_UNIX, os.path.join(host, f".s.PGSQL.{port}")
    return socket.AF_UNSPEC, (host, port)


def host_reacts(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> bool:
    """Whether ``host:port`` reacts (a reply, or the connection closed) to an SSLRequest on a
    new socket within ``timeout``: blocking, for a worker thread."""
    family, address = _address(host, port)
    try:
        if family == socket.AF_UNIX:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(address)
        else:
            sock = socket.create_connection(address, timeout=timeout)
        with sock:
            sock.settimeout(timeout)
            sock.sendall(_SSL_REQUEST)
            sock.recv(1)
            return True
    except OSError:  # refused, unreachable, or no reaction in time (a timeout is an OSError)
        return False


async def host_reacts_async(host: str, port: int) -> bool:
    """:func:`host_reacts` on the running loop (within :data:`PROBE_TIMEOUT_S`)."""
    family, address = _address(host, port)
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            if family == socket.AF_UNIX:
                reader, writer = await asyncio.open_unix_connection(address)
            else:
                reader, writer = await asyncio.open_connection(*address)
            try:
                writer.write(_SSL_REQUEST)
                await writer.drain()
                await reader.read(1)
                return True
            finally:
                writer.close()
    except (OSError, TimeoutError):
        return False


class _Answering:
    """What the bounded connections share: the bound on each wait for the server (None: no
    bound) and, once the host was found silent, its address."""

    answer_timeout: float | None = None
    silent: str | None = None  # "host:port" once a wait outlived the bound and the probe
    pgconn: Any
    info: Any

    def _where(self) -> tuple[str, int]:
        return str(self.info.hostaddr or self.info.host), int(self.info.port)

    def _sever(self) -> None:
        try:
            self.silent = f"{self.info.host}:{self.info.port}"
            with socket.socket(fileno=os.dup(self.pgconn.socket)) as sock:
                sock.shutdown(socket.SHUT_RDWR)
        except (OSError, psycopg.Error):
            pass  # already closed: nothing waits on it

    def _no_answer(self, exc: psycopg.Error) -> psycopg.Error:
        if self.silent is None:
            return exc
        return NoAnswer(
            f"no answer from {self.silent} within {self.answer_timeout:g} s and no reaction"
            f" to a probe within {PROBE_TIMEOUT_S:g} s: connection dropped"
        )


class BoundedAsyncConnection(_Answering, psycopg.AsyncConnection[Any]):
    """An async connection whose every wait for the server (statement, fetch, commit) is
    bounded by ``answer_timeout``, past which a host that does not react to a probe has the
    connection dropped (a slow one is waited for)."""

    _timer: asyncio.TimerHandle | None = None
    _probe: asyncio.Task[None] | None = None

    async def wait(self, gen: PQGen[_RV], *args: Any, **kwargs: Any) -> _RV:
        bound = self.answer_timeout
        if bound is None:
            return await super().wait(gen, *args, **kwargs)
        self._timer = asyncio.get_running_loop().call_later(bound, self._suspect, bound)
        try:
            return await super().wait(gen, *args, **kwargs)
        except psycopg.Error as exc:
            raise self._no_answer(exc) from exc
        finally:
            for pending in (self._timer, self._probe):
                if pending is not None:
                    pending.cancel()
            self._timer = self._probe = None

    def _suspect(self, bound: float) -> None:
        self._probe = asyncio.get_running_loop().create_task(self._confirm(bound))

    async def _confirm(self, bound: float) -> None:
        if await host_reacts_async(*self._where()):  # alive, only slow: look again later
            self._timer = asyncio.get_running_loop().call_later(bound, self._suspect, bound)
        else:
            self._sever()


class BoundedConnection(_Answering, psycopg.Connection[Any]):
    """:class:`BoundedAsyncConnection` for a worker thread (transactional runs): one watcher
    thread per connection looks at the wait under way, rather than a thread per statement."""

    _waiting_since: float | None = None
    _watcher: threading.Thread | None = None

    def wait(self, gen: PQGen[_RV], *args: Any, **kwargs: Any) -> _RV:
        if self.answer_timeout is None:
            return super().wait(gen, *args, **kwargs)
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="pgsched-answer", daemon=True)
            self._watcher.start()
        self._waiting_since = time.monotonic()
        try:
            return super().wait(gen, *args, **kwargs)
        except psycopg.Error as exc:
            raise self._no_answer(exc) from exc
        finally:
            self._waiting_since = None

    def _watch(self) -> None:
        while not self.closed:
            time.sleep(_WATCH_EVERY_S)
            since, bound = self._waiting_since, self.answer_timeout
            if since is None or bound is None or time.monotonic() - since < bound:
                continue
            if host_reacts(*self._where()):
                self._waiting_since = time.monotonic() if self._waiting_since else None
            elif self._waiting_since is not None:
                self._sever()
                return


__all__ = [
    "ANSWER_GRACE_S",
    "ENGINE_ANSWER_TIMEOUT_S",
    "BoundedAsyncConnection",
    "BoundedConnection",
    "NoAnswer",
    "host_reacts",
    "host_reacts_async",
]
