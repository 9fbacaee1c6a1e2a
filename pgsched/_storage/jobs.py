"""The jobs and replicas as replicas register them: what they run, with which scopes, and
the cursors of their scopes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from .._records import JobEntry, JobRecord, ReplicaEntry, Row, ScopeCursor, Sighting
from .._structures import LiveReplica, Scope, trusted_scope
from .names import Many
from .statements import Conn, Statements


class JobStatements(Statements):
    """The jobs and replicas as replicas register them: what they run, with which scopes."""

    async def register_jobs(
        self,
        conn: Conn,
        jobs: Sequence[JobEntry],
        upcoming: Sequence[Sequence[datetime]],
        replica: ReplicaEntry,
    ) -> None:
        """Record the jobs this replica runs with each one's upcoming plans, refresh the
        replica's row and remove those of replicas past their expiry."""
        params = {
            "jobs": [j.name for j in jobs],
            "schedules": [j.schedule for j in jobs],
            "scopes": [j.scopes for j in jobs],
            "recurrences": [j.recurrence for j in jobs],
            "max_attempts": [j.max_attempts for j in jobs],
            # One array literal per job: unnest() would flatten a two-dimensional array.
            "upcoming": ["{" + ",".join(f'"{p.isoformat()}"' for p in u) + "}" for u in upcoming],
            "runner": replica.runner_id,
            "host": replica.host,
            "version": replica.version,
            "http_address": replica.http_address,
            "started_at": replica.started_at,
            "expiry": replica.expiry,
            "live_for": replica.live_for,
        }
        await self._exec(conn, "register_jobs", params)

    async def unregister_replica(self, conn: Conn, runner: str) -> None:
        await self._exec(conn, "unregister_replica", {"runner": runner})

    async def list_replicas(self, conn: Conn) -> list[LiveReplica]:
        return await self._many_as(conn, "list_replicas", LiveReplica)

    async def forget_job(self, conn: Conn, job: str) -> tuple[bool, list[str]]:
        """Remove ``job`` from job_state unless a live replica registers it: (whether it was
        removed, the live replicas registering it)."""
        row = await self._one(conn, "forget_job", {"job": job})
        return bool(row["forgotten"]), list(row["live"])

    async def job_scopes_mode(self, conn: Conn, job: str) -> str | None:
        """What replicas recorded ``job`` runs for (``global``, ``static``, ``callable``,
        ``dynamic``), None when no replica of this version registered it."""
        row = await self._opt(conn, "job_scopes_mode", {"job": job})
        return None if row is None or row["scopes"] is None else str(row["scopes"])

    async def known_scopes(
        self, conn: Conn, job: str, *, dynamic: bool, only: Scope | None = None
    ) -> list[Scope]:
        """The scopes ``job`` has now as the database knows them: a dynamic job's schedules,
        else the scopes of its latest scheduled plan; with ``only``, that scope if it is one."""
        params = {
            "job": job,
            "kind": None if only is None else only.kind,
            "id": None if only is None else only.id,
        }
        name: Many = "schedule_scopes" if dynamic else "planned_scopes"
        rows = await self._many(conn, name, params)
        return [trusted_scope(r["scope_kind"], r["scope_id"]) for r in rows]

    async def job_schedule(self, conn: Conn, job: str) -> str | None:
        """The schedule replicas registered for ``job`` (``"dynamic"`` for a dynamic job),
        ``""`` when it has none on record, None when no replica registered the job."""
        row = await self._opt(conn, "job_schedule", {"job": job})
        return None if row is None else str(row["schedule"] or "")

    async def job_exists(self, conn: Conn, job: str) -> bool:
        return bool((await self._one(conn, "job_exists", {"job": job}))["known"])

    async def job_record(self, conn: Conn, job: str) -> JobRecord:
        """What the database knows of ``job`` for a trigger (see ``JobRecord``)."""
        return await self._one_as(conn, "job_record", JobRecord, {"job": job})

    async def scope_cursor(self, conn: Conn, job: str, scope: Scope) -> ScopeCursor | None:
        """A code-defined job's cursor of ``scope``, None when it has none."""
        params = {"job": job, "kind": scope.kind, "id": scope.id}
        return await self._opt_as(conn, "scope_cursor", ScopeCursor, params)

    async def job_known(self, conn: Conn, job: str) -> bool:
        """Whether ``job`` has a job_state row, rows in the ledger, or a live replica."""
        return bool((await self._one(conn, "job_known", {"job": job}))["known"])

    async def sight_cursors(self, conn: Conn, job: str, seen: Sighting) -> Row:
        """Write ``job``'s scopes as seen now: cursors for new ones, retired ones for those
        gone while the job's live replicas agree on its scopes; returns the counts (seen,
        retired, respecified) and whether they agreed."""
        params = {
            "job": job,
            "kinds": seen.kinds,
            "ids": seen.ids,
            "dues": seen.dues,
            "first": seen.first,
            "spec": seen.spec,
            "seen_at": seen.seen_at,
            "runner": seen.runner,
            "digest": seen.digest,
        }
        async with conn.transaction():
            await self._exec(conn, "lock_sight", {"key": f"pgsched.sight:{self.schema}\x1f{job}"})
            return await self._one(conn, "sight_cursors", params)

    async def analyze_cursors(self, conn: Conn) -> None:
        """Refresh the planner's statistics of the cursor table (owner only; skipped else)."""
        await self._exec(conn, "analyze_cursors")

    async def scope_digests(self, conn: Conn) -> list[Row]:
        """The live replicas' runner ids, jobs and scope-list digests by job."""
        return await self._many(conn, "scope_digests")
