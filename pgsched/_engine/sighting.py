"""First sight: each code-defined job's scopes as this replica sees them, written to the
database only when they (or the job's schedule) change, never every tick. A new scope gets
its cursor there; one that left the fan-out has its cursor retired. Also keeps the scopes'
own objects, so a claim hands the handler the ``Scope`` the job returned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from .._config import JobSpec, evaluate_scopes
from .._model import Scope
from .._planning.cursors import due_at, first_plan, spec_key
from .._records import Sighting
from .._results import describe_error
from .._storage.store import Conn, Store
from .recorder import Recorder

Known = Mapping[tuple[str, str], Scope]


@dataclass
class _Seen:
    spec: str
    scopes: Sequence[Scope]
    known: Known


class Sightings:
    """Per-job scopes last written by this replica."""

    def __init__(self, store: Store, recorder: Recorder, lookback: timedelta) -> None:
        self._store, self._recorder = store, recorder
        # A plan that fell due within the last tick interval counts at first sight.
        self._lookback = lookback
        self._seen: dict[str, _Seen] = {}

    async def see(self, conn: Conn, job: JobSpec, now: datetime) -> tuple[Known, bool]:
        """The job's scopes at ``now`` (the database's clock) by key, and whether this call
        wrote them (new cursors may be due at once). A failing scopes callable keeps the
        scopes last seen: the cursors in the database still are the fan-out."""
        last = self._seen.get(job.name)
        try:
            scopes = await evaluate_scopes(job, now)
        except Exception as exc:
            self._recorder.error("scopes_error", job=job.name, error=describe_error(exc))
            return (last.known if last is not None else {}), False
        spec = spec_key(job.schedule)
        if last is not None and last.spec == spec and _same(last.scopes, scopes):
            return last.known, False
        known = {(s.kind, s.id): s for s in scopes}
        await self._store.sight_cursors(conn, job.name, self._sighting(job, known, spec, now))
        self._seen[job.name] = _Seen(spec, scopes, known)
        return known, True

    def _sighting(self, job: JobSpec, known: Known, spec: str, now: datetime) -> Sighting:
        first = first_plan(job, now, self._lookback)
        keys = sorted(known)
        return Sighting(
            kinds=[k for k, _ in keys],
            ids=[i for _, i in keys],
            dues=[due_at(job, k, i, first) for k, i in keys],
            first=first,
            spec=spec,
            seen_at=now,
        )

    def forget(self, job: str) -> None:
        """Write the job's scopes again at its next sight (its write may have failed)."""
        self._seen.pop(job, None)

    def forget_all(self, *_: object) -> None:
        """Write every job's scopes again: the replica now writes to another server (a
        failover), which may lack the cursors written to the previous one."""
        self._seen.clear()


def _same(a: Sequence[Scope], b: Sequence[Scope]) -> bool:
    return a is b or list(a) == list(b)
