"""Which PostgreSQL server pgsched writes to, and what happens when that changes.

A server is known by its system identifier (shared by a primary and the standbys cloned from
it) and its timeline (raised by every promotion, never lowered). Owns the server a replica
(or an Admin) has switched to, the decision on each new server met (the same one; a newer
one, adopted: a failover or switchover; an older timeline of the same system, refused: a
demoted primary that came back writable beside the promoted one), and the steering of new
connections away from a refused host of a multi-host DSN (libpq tries hosts in order, so a
stale primary listed first would otherwise be met again at every connect).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from .._records import Server

# A refused host is left out of new connections for this long, then tried again (it may have
# been rebuilt as a standby, or promoted again).
_AVOID_S = 30.0

# Called with (the previous server or None, the new one, the connection to it) before the
# change is adopted; an exception leaves the change unadopted, to be tried again.
Adopting = Callable[[Server | None, Server, Any], Awaitable[None]]
Adopted = Callable[[Server | None, Server], None]


class ServerWatch:
    """The server connections must reach, for one replica (or one Admin)."""

    def __init__(self) -> None:
        self.current: Server | None = None
        self._adopting: list[Adopting] = []
        self._adopted: list[Adopted] = []
        self._avoid: dict[tuple[str, str], float] = {}
        self._lock: asyncio.Lock | None = None  # made on the loop that adopts

    def on_adopting(self, hook: Adopting) -> None:
        """Run ``hook`` on the first connection to a new server, before it is lent (to put
        back what the new server lacks before anything else is written)."""
        self._adopting.append(hook)

    def on_adopted(self, hook: Adopted) -> None:
        """Call ``hook`` once a new server is adopted (logs, metrics)."""
        self._adopted.append(hook)

    def refusal(self, server: Server) -> str | None:
        """Why a connection to ``server`` must not be used, or None."""
        current = self.current
        if (
            current is not None
            and server.system_identifier == current.system_identifier
            and server.timeline < current.timeline
        ):
            return (
                f"server {server.address} is on timeline {server.timeline}, behind timeline "
                f"{current.timeline} of the server in use (a demoted primary)"
            )
        return None

    async def admit(self, server: Server, conn: Any) -> str | None:
        """None when ``conn`` (to ``server``) may be used, adopting ``server`` when it is
        new; else why not (and its host is avoided for a while)."""
        why = self.refusal(server)
        if why is not None:
            self.avoid(server.address)
            return why
        if self.current is not None and self.current.same(server):
            return None
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:  # several connections meet a new server at once: adopt it once
            previous = self.current
            if previous is not None and previous.same(server):
                return None
            for hook in self._adopting:
                await hook(previous, server, conn)
            self.current = server
            for done in self._adopted:
                done(previous, server)
        return None

    # -- steering -----------------------------------------------------------------------

    def avoid(self, address: str) -> None:
        host, _, port = address.rpartition(":")
        self._avoid[(host, port)] = time.monotonic() + _AVOID_S

    def answered(self, address: str) -> None:
        """A new connection reached ``address`` and may be used: no longer avoided. Steered
        last, the host was reached only because no other would do (a standby refuses a
        read-write session), so it is the server to use now, silent a moment ago or not."""
        host, _, port = address.rpartition(":")
        self._avoid.pop((host, port), None)

    def gives_way(self, address: str, conninfo: str) -> bool:
        """True when a connection to ``address`` should be dropped unused: that host is
        avoided now and ``conninfo`` names another that is not (a silent host's other
        connections are as silent as the one that timed out)."""
        host, _, port = address.rpartition(":")
        if (host, port) not in self._avoid or self._avoid[(host, port)] <= time.monotonic():
            return False
        return self.steer(conninfo) != conninfo

    def steer(self, conninfo: str) -> str:
        """``conninfo`` with the hosts avoided now moved last: libpq tries hosts in order, so
        a new connection reaches another server first and an avoided one only when no other
        will do (a host refused or silent by mistake is still reached)."""
        now = time.monotonic()
        self._avoid = {k: until for k, until in self._avoid.items() if until > now}
        if not self._avoid:
            return conninfo
        params = conninfo_to_dict(conninfo)
        hosts = str(params.get("host") or "").split(",")
        if len(hosts) < 2:
            return conninfo
        ports = str(params.get("port") or "").split(",")
        ports = ports * len(hosts) if len(ports) == 1 else ports
        addrs = str(params.get("hostaddr") or "").split(",")
        order = sorted(range(len(hosts)), key=lambda i: (hosts[i], ports[i]) in self._avoid)
        if order == list(range(len(hosts))):
            return conninfo
        changed: dict[str, str] = {"host": ",".join(hosts[i] for i in order)}
        if params.get("port"):
            changed["port"] = ",".join(ports[i] for i in order)
        if params.get("hostaddr") and len(addrs) == len(hosts):
            changed["hostaddr"] = ",".join(addrs[i] for i in order)
        return make_conninfo(conninfo, **changed)
