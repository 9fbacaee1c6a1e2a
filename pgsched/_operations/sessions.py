"""The dashboard's sign-in sessions, kept in the database so that every replica and ``pgsched
web`` behind one load balancer knows them: a random id in the browser's cookie, only its
sha256 stored, with the role it grants and its end. ``Operations.sessions`` gives them to the
dashboard (not an operator action: ``Admin`` and ``AsyncAdmin`` do not offer them).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta

from .._errors import ConfigError
from .._storage.dashboard import DashboardStore
from .._storage.statements import Conn

# A session ends this long after sign-in, whatever it did meanwhile (an absolute bound: a
# stolen cookie is worth at most this long; signing in again starts a new one).
SESSION_LIFETIME = timedelta(hours=12)
SESSION_ROLES = ("operator", "viewer")
_MAX_ID = 200  # characters: a cookie longer than any id we give out is not looked up


@dataclass(frozen=True, slots=True)
class Session:
    """A signed-in browser: the role it was granted, the actor its actions are recorded
    under, and when it ends."""

    role: str
    actor: str
    expires_at: datetime


class Sessions:
    """Sign-in, look-up and sign-out over the dashboard's statements and a connector."""

    def __init__(
        self, dash: DashboardStore, connect: Callable[[], AbstractAsyncContextManager[Conn]]
    ) -> None:
        self._dash, self._conn = dash, connect

    async def open(self, role: str, actor: str) -> tuple[str, Session]:
        """A new session granting ``role``: its id (for the cookie, never stored) and it."""
        if role not in SESSION_ROLES:
            raise ConfigError(f"role={role!r} must be one of {', '.join(SESSION_ROLES)}")
        ident = secrets.token_urlsafe(32)
        async with self._conn() as conn:
            ends = await self._dash.open_session(
                conn, _digest(ident), role, actor, SESSION_LIFETIME
            )
        return ident, Session(role, actor, ends)

    async def find(self, ident: str) -> Session | None:
        """The session of this id, None when there is none or it has ended."""
        if not ident or len(ident) > _MAX_ID:
            return None
        async with self._conn() as conn:
            row = await self._dash.find_session(conn, _digest(ident))
        if row is None:
            return None
        return Session(str(row["role"]), str(row["actor"]), row["expires_at"])

    async def close(self, ident: str) -> None:
        """End the session of this id (nothing when there is none)."""
        if not ident or len(ident) > _MAX_ID:
            return
        async with self._conn() as conn:
            await self._dash.close_session(conn, _digest(ident))


def _digest(ident: str) -> bytes:
    return hashlib.sha256(ident.encode()).digest()
