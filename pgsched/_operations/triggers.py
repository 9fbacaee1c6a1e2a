"""Manual runs: the scopes a trigger may name, and what a plan that already exists means for
it. A job's scopes come from its code when the caller registered the job, else from what its
replicas recorded (``job_state.scopes``, the scopes planned in the day up to its latest
scheduled plan, a dynamic job's schedules): an operator without the APP is checked against
what the replicas run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from .._config import JobSpec, evaluate_scopes, scopes_mode
from .._errors import ConfigError, FieldError, PgschedError
from .._model import GLOBAL, Scope
from .._storage.store import Conn, Store
from .._views import Triggered

ENDED_STATUSES = ("SUCCESS", "FAILED", "CANCELLED")


class TriggerScopes:
    """The scopes one trigger queues runs for (``scope``, or ``all_scopes``), validated."""

    def __init__(self, store: Store, conn: Conn, job: str, spec: JobSpec | None) -> None:
        self._store, self._conn, self._job, self._spec = store, conn, job, spec

    async def resolve(self, scope: Scope | None, all_scopes: bool) -> list[Scope]:
        job = self._job
        if scope is not None and not isinstance(scope, Scope):
            raise ConfigError(f"job {job!r}: scope={scope!r} must be a pgsched.Scope")
        if not isinstance(all_scopes, bool):
            raise ConfigError(f"job {job!r}: all_scopes={all_scopes!r} must be True or False")
        mode = await self._mode()
        if all_scopes:
            if scope is not None:
                raise FieldError(
                    f"job {job!r}: give one scope ({{scope}}) or all ({{all_scopes}}), not both",
                    {"scope": scope, "all_scopes": True},
                )
            return await self._all(mode)
        if scope is None:
            if mode in ("global", None):
                return [GLOBAL]
            raise FieldError(
                f"job {job!r} runs for {_DESCRIBED[mode]}: name one ({{scope}}) "
                "or trigger every one ({all_scopes})",
                {"scope": Scope("KIND", "ID"), "all_scopes": True},
            )
        await self._check(scope, mode)
        return [scope]

    async def _mode(self) -> str | None:
        if self._spec is not None:
            return scopes_mode(self._spec)
        return await self._store.job_scopes_mode(self._conn, self._job)

    async def _all(self, mode: str | None) -> list[Scope]:
        if mode == "global":
            return [GLOBAL]
        if self._spec is not None and mode != "dynamic":
            now = await self._store.now(self._conn)
            return list(await evaluate_scopes(self._spec, now))
        found = await self._store.known_scopes(self._conn, self._job, dynamic=mode == "dynamic")
        if mode is None:  # no replica of this version said: the scopes it planned, or GLOBAL
            return found or [GLOBAL]
        if not found:
            raise ConfigError(f"job {self._job!r} has no scopes now: {_NONE[mode]}")
        return found

    async def _check(self, scope: Scope, mode: str | None) -> None:
        if mode is None:  # recorded by no replica of this version: nothing to check against
            return
        if mode == "global":
            known = scope == GLOBAL
        elif self._spec is not None and mode != "dynamic":
            now = await self._store.now(self._conn)
            known = scope in await evaluate_scopes(self._spec, now)
        else:
            dynamic = mode == "dynamic"
            found = await self._store.known_scopes(
                self._conn, self._job, dynamic=dynamic, only=scope
            )
            known = bool(found)
        if not known:
            raise ConfigError(
                f"job {self._job!r}: scope {scope} is not one of its scopes "
                f"({_DESCRIBED[mode]}{_WHY[mode] if self._spec is None else ''})"
            )


def check_not_ended(job: str, at: datetime | None, rows: Sequence[Triggered]) -> None:
    """An explicit ``at`` names a plan: one that already ended is not queued again."""
    if at is None:
        return
    for row in rows:
        if not row.created and row.status in ENDED_STATUSES:
            raise PgschedError(
                f"job {job!r}, scope {row.scope}: the plan at {row.plan_time.isoformat()} "
                f"already ended (execution {row.id} is {row.status}); nothing was queued"
            )


_DESCRIBED = {
    "global": "the global scope only",
    "static": "the scopes listed in its code",
    "callable": "the scopes its code computes",
    "dynamic": "one scope per stored schedule",
}
_WHY = {
    "global": "",
    "static": "; checked against the scopes its replicas planned in the last day",
    "callable": "; checked against the scopes its replicas planned in the last day",
    "dynamic": ": no schedule for it",
}
_NONE = {
    "static": "its replicas have planned none yet",
    "callable": "its replicas have planned none yet",
    "dynamic": "it has no schedules",
}
