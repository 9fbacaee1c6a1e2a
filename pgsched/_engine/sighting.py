"""First sight: each code-defined job's scopes as this replica sees them, written to the
database only when they (or the job's schedule) change, never every tick. A new scope gets
its cursor there; one that left the fan-out has its cursor retired, but only while every live
replica that runs the job lists the same scopes (a digest of each replica's list is kept in
its ``replicas`` row): in a rolling update that changes the list, the replicas of the two
versions would otherwise retire each other's scopes whenever one starts. A list written
while they disagreed is written again once they agree. Also keeps the scopes' own objects,
so a claim hands the handler the ``Scope`` the job returned.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from .._errors import describe_error
from .._jobs.spec import JobSpec, evaluate_scopes
from .._planning.cursors import due_at, first_plan, scope_digest, spec_key
from .._records import Sighting
from .._storage.statements import ANALYZE_AFTER, Conn
from .._storage.store import Store
from .._structures import Scope
from .heap import TRIM_AFTER_SCOPES, release_free_heap
from .recorder import Recorder

Known = Mapping[tuple[str, str], Scope]


@dataclass
class _Seen:
    spec: str
    scopes: Sequence[Scope]
    known: Known
    digest: str
    agreed: bool  # the write retired what the list lacks: the live replicas agreed on it


class Sightings:
    """Per-job scopes last written by this replica."""

    def __init__(
        self,
        store: Store,
        recorder: Recorder,
        lookback: timedelta,
        runner_id: str,
        recheck_every: float,
    ) -> None:
        self._store, self._recorder = store, recorder
        # A plan that fell due within the last tick interval counts at first sight.
        self._lookback = lookback
        self._runner_id, self._recheck_every = runner_id, recheck_every
        self._seen: dict[str, _Seen] = {}
        self._checked_at: float | None = None

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
        spec = spec_key(job.recurrence)
        if last is not None and last.spec == spec and _same(last.scopes, scopes):
            return last.known, False
        known = {(s.kind, s.id): s for s in scopes}
        sighting = self._sighting(job, known, spec, now)
        digest = sighting.digest
        written = await self._store.sight_cursors(conn, job.name, sighting)
        del sighting  # its lists (values per scope) are freed before the heap is trimmed
        if len(known) >= TRIM_AFTER_SCOPES:
            release_free_heap()
        if written["seen"] >= ANALYZE_AFTER:
            await self._store.analyze_cursors(conn)
        agreed = bool(written["agreed"])
        if not agreed:
            self._recorder.log.info("scopes_retirement_deferred", job=job.name)
        self._seen[job.name] = _Seen(spec, scopes, known, digest, agreed)
        if self._checked_at is None:  # the write just compared: the next check is due later
            self._checked_at = time.monotonic()
        return known, True

    async def settle(self, conn: Conn) -> None:
        """Compare, at most once per ``recheck_every``, the scope lists of the other live
        replicas with this one's: a job they now disagree on is marked so, and one marked so
        that they all agree on again is written again at its next sight (retiring what none
        of them lists any more). A job whose digest this replica's own row has lost (the row
        was deleted past its expiry and registered again empty) is written again too: until
        then its peers would count it as disagreeing, or not count it at all."""
        clock = time.monotonic()
        if not self._seen or (
            self._checked_at is not None and clock - self._checked_at < self._recheck_every
        ):
            return
        self._checked_at = clock
        rows = await self._store.scope_digests(conn)
        mine: dict[str, str] = next(
            (r["digests"] for r in rows if r["runner_id"] == self._runner_id), {}
        )
        others = [r for r in rows if r["runner_id"] != self._runner_id]
        for name, seen in list(self._seen.items()):
            digests = [row["digests"].get(name) for row in others if name in row["jobs"]]
            if mine.get(name) != seen.digest:
                del self._seen[name]
            elif any(d is not None and d != seen.digest for d in digests):
                seen.agreed = False
            elif not seen.agreed and all(d == seen.digest for d in digests):
                del self._seen[name]

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
            runner=self._runner_id,
            digest=scope_digest(keys),
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
