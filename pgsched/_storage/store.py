"""The only module that runs SQL. Statements come from the packaged ``sql/queries.sql``."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields
from datetime import datetime, timedelta
from functools import cache, lru_cache
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar, cast
from uuid import UUID

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.rows import args_row, class_row, dict_row

from .._records import (
    ClaimTerms,
    DueSchedule,
    Finish,
    JobEntry,
    JobRecord,
    PartitionFigures,
    PreviousTask,
    Probe,
    RecordedTask,
    Renewal,
    ReplicaEntry,
    Restore,
    Row,
    RunFilter,
    ScheduleMove,
    ScheduleRows,
    ScopeCursor,
    Sighting,
    TaskAttempt,
    WonPlan,
    running_before,
)
from .._structures import (
    Attempt,
    Execution,
    FailedAttempt,
    JobStatus,
    LiveReplica,
    RunHistory,
    Scope,
    Triggered,
    trusted_scope,
)

_V = TypeVar("_V")
Conn = AsyncConnection[Any]

# The claims are planned on every execution, never from a server-side prepared statement: a
# generic plan chosen while the table was small (psycopg prepares a statement on its fifth
# use) stays in the session and can turn a claim's index probes into scans of a table that
# has since grown, seconds per claim. Planning them costs well under a millisecond.
_PLAN_EACH_TIME = False
# A write of this many new cursors or schedules has the table analyzed (analyze_cursors,
# analyze_schedules): claims planned on the figures of before read every row of the job.
ANALYZE_AFTER = 1_000
# A migration that misses its lock (it set a short lock_timeout) is tried again this often,
# for this long.
MIGRATION_LOCK_RETRY_S = 1.0
MIGRATION_LOCK_PATIENCE_S = 600.0
_NAME = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_(\w+)\.sql$")


@contextmanager
def _naming(name: str) -> Iterator[None]:
    """A database error inside names the statement ``name`` (describe_error says it): a tick
    runs a dozen, and "canceling statement due to statement timeout" alone does not tell which
    one ran long."""
    try:
        yield
    except psycopg.Error as exc:
        if getattr(exc, "pgsched_statement", None) is None:
            exc.pgsched_statement = name  # type: ignore[attr-defined]
            exc.add_note(f"(pgsched's {name} statement)")
        raise


def sql_dir() -> Traversable:
    """The packaged ``sql/`` directory (inside the wheel), or the source checkout's."""
    packaged = resources.files("pgsched").joinpath("sql")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "sql"


@cache
def _query_texts() -> dict[str, str]:
    text = sql_dir().joinpath("queries.sql").read_text(encoding="utf-8")
    parts = _NAME.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def migration_files() -> list[tuple[str, str, str]]:
    """``(version, name, text)`` of every migration, in order."""
    out = []
    for entry in sql_dir().joinpath("migrations").iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            out.append((match[1], match[2], entry.read_text(encoding="utf-8")))
    return sorted(out)


# The partitions retention deletes rows from (the others it drops whole), by statement name.
_PRUNED_WHOLE_ROWS = {
    "prune_default_batch": "cron_executions_default",
    "prune_legacy_batch": "cron_executions_legacy",
}


@lru_cache(maxsize=32)
def _catalog(schema: str) -> Mapping[str, sql.Composed]:
    """The statements of ``schema`` by name, formatted once per process and schema (of the
    last few schemas used): every store of the schema (claims, skips, schedules, ...) shares
    them."""
    ident = sql.Identifier(schema)
    texts = dict(_query_texts())  # a copy: the texts are read once per process
    prune = texts.pop("prune_batch")
    del texts["analyze_partition"]  # formatted per call, with its partition
    catalog = {name: sql.SQL(text).format(schema=ident) for name, text in texts.items()}
    for name, partition in _PRUNED_WHOLE_ROWS.items():
        catalog[name] = sql.SQL(prune).format(schema=ident, partition=sql.Identifier(partition))
    return MappingProxyType(catalog)


class _Statements:
    """The named statements of one schema, and how to run them."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        # Prefix of the claims' per-scope advisory lock keys (overlap="forbid"): one schema's
        # scopes never hold up another's.
        self.lock_ns = f"pgsched.scope:{schema}\x1f"
        # Named per call: the partition is an identifier, never a parameter.
        self._analyze_partition = sql.SQL(_query_texts()["analyze_partition"])
        self._q = _catalog(schema)

    async def _rows(
        self,
        conn: Conn,
        name: str,
        params: dict[str, Any] | None = None,
        *,
        prepare: bool | None = None,
    ) -> list[Row]:
        async with conn.cursor(row_factory=dict_row) as cur:
            await self._execute(cur, name, params, prepare=prepare)
            return await cur.fetchall() if cur.description else []

    async def _typed(
        self,
        conn: Conn,
        name: str,
        cls: type[_V],
        params: dict[str, Any] | None = None,
        *,
        prepare: bool | None = None,
    ) -> list[_V]:
        async with conn.cursor(row_factory=class_row(cls)) as cur:
            await self._execute(cur, name, params, prepare=prepare)
            return await cur.fetchall()

    async def _tuples(
        self, conn: Conn, name: str, cls: type[_V], params: dict[str, Any], *, prepare: bool
    ) -> list[_V]:
        """Rows as ``cls(*columns)`` (a NamedTuple): for statements read by the thousand,
        where a dict or keyword arguments per row cost per column. Their columns come in
        binary: a timestamp is then read from a number, not parsed from text (0.7 against
        1.2 us a column)."""
        async with conn.cursor(row_factory=args_row(cls)) as cur:
            await self._execute(cur, name, params, prepare=prepare, binary=True)
            return await cur.fetchall()

    async def _plain(self, conn: Conn, name: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """Rows as tuples of their columns: for statements that return a row per run."""
        async with conn.cursor() as cur:
            await self._execute(cur, name, params)
            return await cur.fetchall()

    async def _rowcount(self, conn: Conn, name: str, params: dict[str, Any]) -> int:
        async with conn.cursor() as cur:
            await self._execute(cur, name, params)
            return cur.rowcount

    async def _execute(
        self,
        cur: psycopg.AsyncCursor[Any],
        name: str,
        params: dict[str, Any] | None,
        *,
        prepare: bool | None = None,
        binary: bool | None = None,
    ) -> None:
        with _naming(name):
            await cur.execute(self._q[name], params, prepare=prepare, binary=binary)

    async def _one(self, conn: Conn, name: str, params: dict[str, Any] | None = None) -> Row:
        rows = await self._rows(conn, name, params)
        return rows[0]


class _JobStatements(_Statements):
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
        await self._rows(conn, "register_jobs", params)

    async def unregister_replica(self, conn: Conn, runner: str) -> None:
        await self._rows(conn, "unregister_replica", {"runner": runner})

    async def list_replicas(self, conn: Conn) -> list[LiveReplica]:
        return await self._typed(conn, "list_replicas", LiveReplica)

    async def forget_job(self, conn: Conn, job: str) -> tuple[bool, list[str]]:
        """Remove ``job`` from job_state unless a live replica registers it: (whether it was
        removed, the live replicas registering it)."""
        row = await self._one(conn, "forget_job", {"job": job})
        return bool(row["forgotten"]), list(row["live"])

    async def job_scopes_mode(self, conn: Conn, job: str) -> str | None:
        """What replicas recorded ``job`` runs for (``global``, ``static``, ``callable``,
        ``dynamic``), None when no replica of this version registered it."""
        rows = await self._rows(conn, "job_scopes_mode", {"job": job})
        return None if not rows or rows[0]["scopes"] is None else str(rows[0]["scopes"])

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
        name = "schedule_scopes" if dynamic else "planned_scopes"
        rows = await self._rows(conn, name, params)
        return [trusted_scope(r["scope_kind"], r["scope_id"]) for r in rows]

    async def job_schedule(self, conn: Conn, job: str) -> str | None:
        """The schedule replicas registered for ``job`` (``"dynamic"`` for a dynamic job),
        ``""`` when it has none on record, None when no replica registered the job."""
        rows = await self._rows(conn, "job_schedule", {"job": job})
        return None if not rows else str(rows[0]["schedule"] or "")

    async def job_exists(self, conn: Conn, job: str) -> bool:
        return bool((await self._one(conn, "job_exists", {"job": job}))["known"])

    async def job_record(self, conn: Conn, job: str) -> JobRecord:
        """What the database knows of ``job`` for a trigger (see ``JobRecord``)."""
        return (await self._typed(conn, "job_record", JobRecord, {"job": job}))[0]

    async def scope_cursor(self, conn: Conn, job: str, scope: Scope) -> ScopeCursor | None:
        """A code-defined job's cursor of ``scope``, None when it has none."""
        params = {"job": job, "kind": scope.kind, "id": scope.id}
        rows = await self._typed(conn, "scope_cursor", ScopeCursor, params)
        return rows[0] if rows else None

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
            await self._rows(conn, "lock_sight", {"key": f"pgsched.sight:{self.schema}\x1f{job}"})
            return await self._one(conn, "sight_cursors", params)

    async def analyze_cursors(self, conn: Conn) -> None:
        """Refresh the planner's statistics of the cursor table (owner only; skipped else)."""
        await self._rows(conn, "analyze_cursors")

    async def scope_digests(self, conn: Conn) -> list[Row]:
        """The live replicas' runner ids, jobs and scope-list digests by job."""
        return await self._rows(conn, "scope_digests")


class _LedgerStatements(_Statements):
    """The ledger's partitions and retention (docs/operations.md)."""

    async def prune_batch(
        self, conn: Conn, older_than: timedelta, batch: int, *, legacy: bool = False
    ) -> int:
        """Delete one batch of old finished rows of the DEFAULT partition (``legacy``: of the
        legacy one); returns how many."""
        name = "prune_legacy_batch" if legacy else "prune_default_batch"
        row = await self._one(conn, name, {"older_than": older_than, "batch": batch})
        return int(row["deleted"])

    async def has_legacy_partition(self, conn: Conn) -> bool:
        return bool((await self._one(conn, "has_legacy_partition"))["present"])

    async def old_partitions(self, conn: Conn, older_than: timedelta) -> list[str]:
        """The partitions whose every plan is older than ``older_than``, oldest first."""
        rows = await self._rows(conn, "old_partitions", {"older_than": older_than})
        return [str(r["name"]) for r in rows]

    async def drop_partition(self, conn: Conn, name: str) -> int | None:
        """Drop a partition with no unfinished row; returns its rows, None when kept."""
        dropped = int((await self._one(conn, "drop_partition", {"name": name}))["dropped"])
        return None if dropped < 0 else dropped

    async def scheduled_row(
        self, conn: Conn, job: str, scope: Scope, plan: datetime
    ) -> Triggered | None:
        """The scheduled execution of ``job``'s plan at ``plan`` for ``scope``, if any."""
        params = {"job": job, "kind": scope.kind, "id": scope.id, "plan": plan}
        rows = await self._typed(conn, "scheduled_row", Triggered, params)
        return rows[0] if rows else None

    async def ensure_partitions(self, conn: Conn, times: Sequence[datetime]) -> int:
        """Create the partitions these plan times lack (before a backfill or trigger)."""
        if not times:
            return 0
        return int((await self._one(conn, "ensure_partitions", {"times": list(times)}))["made"])

    async def partition_figures(
        self, conn: Conn, first_plan: datetime, last_plan: datetime
    ) -> list[PartitionFigures]:
        """The partitions holding plans from ``first_plan`` to ``last_plan``, with whether the
        planner has figures for their rows."""
        params = {"schema": self.schema, "first_plan": first_plan, "last_plan": last_plan}
        return await self._typed(conn, "partition_figures", PartitionFigures, params)

    async def analyze_partition(self, conn: Conn, name: str) -> None:
        """Analyze one partition (skipped by the server unless this role owns it)."""
        ident = sql.Identifier(self.schema)
        statement = self._analyze_partition.format(schema=ident, partition=sql.Identifier(name))
        with _naming("analyze_partition"):
            await conn.execute(statement)

    async def partitions_ahead(self, conn: Conn) -> int:
        """Create the partitions from yesterday's to ``ahead`` past now that are missing."""
        return int((await self._one(conn, "partitions_ahead"))["made"])


class _SchemaStatements(_Statements):
    """Creating and upgrading the schema."""

    async def migrate(self, conn: Conn) -> list[str]:
        """Apply the migrations not yet applied; returns their versions. Safe concurrently.

        Each migration commits on its own, under the migrate lock: a step that scans a large
        table under a weak lock (validating a constraint) is then not held up by, nor holds,
        the strong lock of the next one (partitioning the ledger, migration 0014)."""
        applied_now = []
        for version, name, text in migration_files():
            if await self._apply_patiently(conn, version, name, text):
                applied_now.append(version)
        return applied_now

    async def _apply_patiently(self, conn: Conn, version: str, name: str, text: str) -> bool:
        """Apply one migration; False when it was applied already. A migration that sets a
        short lock_timeout (one taking a strong lock on the ledger) and misses its lock is
        tried again a second later, for up to ten minutes: a lock request left queued
        behind a long transaction would hold up every replica's statements behind it."""
        deadline = time.monotonic() + MIGRATION_LOCK_PATIENCE_S
        while True:
            try:
                return await self._apply(conn, version, name, text)
            except psycopg.errors.LockNotAvailable:
                if time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(MIGRATION_LOCK_RETRY_S)

    async def _apply(self, conn: Conn, version: str, name: str, text: str) -> bool:
        async with conn.transaction():
            await self._rows(conn, "migrate_lock", {"key": f"pgsched.migrate:{self.schema}"})
            quoted = sql.Identifier(self.schema).as_string(conn)
            if not (await self._one(conn, "schema_exists", {"schema": quoted}))["present"]:
                await conn.execute(self._q["create_schema"])
            await conn.execute(self._q["migrate_bootstrap"])
            done = {r["version"] for r in await self._rows(conn, "applied_migrations")}
            if version in done:
                return False
            body = sql.SQL(text).format(schema=sql.Identifier(self.schema))
            await conn.execute(body)
            await self._rows(conn, "record_migration", {"version": version, "name": name})
            return True

    async def is_migrated(self, conn: Conn) -> bool:
        """True when every migration this version ships has been applied."""
        table = sql.Identifier(self.schema, "schema_migrations").as_string(conn)
        present = await self._one(conn, "has_migrations_table", {"table": table})
        if not present["present"]:
            return False
        done = {r["version"] for r in await self._rows(conn, "applied_migrations")}
        return all(version in done for version, _, _ in migration_files())


class Store(_SchemaStatements, _JobStatements, _LedgerStatements):
    """Statements against one schema; every method takes the connection to use."""

    # -- the tick -----------------------------------------------------------------------

    async def tick_probe(
        self,
        conn: Conn,
        jobs: Sequence[str],
        dynamic: Sequence[str] = (),
        clock: datetime | None = None,
    ) -> Probe:
        """The tick's one read; ``dynamic`` are the jobs whose schedules are their cursors,
        ``clock`` the database's clock at the previous tick (the bound of its reads of RUNNING,
        FAILED and PENDING rows, see running_before)."""
        static = [job for job in jobs if job not in set(dynamic)]
        params = {
            "jobs": list(jobs),
            "dynamic": list(dynamic),
            "static": static,
            "running_before": running_before(clock),
        }
        if conn.prepare_threshold is None:  # behind a transaction pooler: nowhere to keep a plan
            row = await self._one(conn, "tick_probe", params)
        else:
            async with conn.transaction():
                await self._rows(conn, "generic_plans")
                (row,) = await self._rows(conn, "tick_probe", params, prepare=True)
        next_due = dict(zip(dynamic, row["dynamic_next"], strict=True))
        next_due.update(zip(static, row["static_next"], strict=True))
        return Probe(
            now=row["now"],
            paused=frozenset(row["paused"]),
            stale_jobs=frozenset(row["stale_jobs"]),
            retry=frozenset(row["retry"]),
            pending=frozenset(row["pending"]),
            next_due=next_due,
        )

    async def synchronous_commit(self, conn: Conn) -> None:
        """The current transaction commits only once a synchronous standby has it."""
        await self._rows(conn, "synchronous_commit")

    async def commit_phase(self, conn: Conn, idle: timedelta, *, synchronous: bool) -> None:
        """A transactional run's handler has returned: the transaction may now sit idle for
        ``idle`` at most and, ``synchronous``, commits once a synchronous standby has it."""
        await self._rows(conn, "commit_phase", _commit_params(idle, synchronous))

    def commit_phase_sync(
        self, conn: psycopg.Connection[Any], idle: timedelta, *, synchronous: bool
    ) -> None:
        """:meth:`commit_phase` on a sync connection."""
        with _naming("commit_phase"):
            conn.execute(self._q["commit_phase"], _commit_params(idle, synchronous))

    async def synchronous_standbys(self, conn: Conn) -> Row:
        """``names`` (synchronous_standby_names), ``synchronous`` (connected sync or quorum
        standbys) and ``hidden`` (walsenders whose state this role may not read)."""
        return await self._one(conn, "synchronous_standbys")

    async def previous_outcomes(
        self, conn: Conn, keys: Sequence[tuple[str, Scope, datetime]]
    ) -> dict[int, str]:
        """For each (job, scope, plan) of ``keys``, by position: the status (SUCCESS or
        FAILED) of the scope's latest finished plan before it; absent when there is none."""
        params = {
            "jobs": [k[0] for k in keys],
            "kinds": [k[1].kind for k in keys],
            "ids": [k[1].id for k in keys],
            "plans": [k[2] for k in keys],
        }
        rows = await self._rows(conn, "previous_outcomes", params)
        return {int(r["i"]) - 1: str(r["status"]) for r in rows}

    async def heartbeat(self, conn: Conn, leases: Sequence[Renewal]) -> set[UUID]:
        """Renew the leases; returns the ids still held."""
        return {ident for (ident,) in await self._plain(conn, "heartbeat", _renewal_params(leases))}

    async def finish(self, conn: Conn, batch: Sequence[Finish]) -> dict[UUID, datetime | None]:
        """Write terminal rows; returns ``{id: next_retry_at}`` for the writes that held."""
        return dict(await self._plain(conn, "finish", _finish_params(batch)))

    async def lease_status(
        self, conn: Conn, execution_id: UUID, token: UUID, plan_time: datetime
    ) -> str | None:
        """The execution's status while ``token`` holds its lease, else None."""
        params = {"id": execution_id, "token": token, "plan": plan_time}
        rows = await self._rows(conn, "lease_status", params)
        return str(rows[0]["status"]) if rows else None

    def finish_sync(
        self, conn: psycopg.Connection[Any], batch: Sequence[Finish]
    ) -> dict[UUID, datetime | None]:
        """:meth:`finish` on a sync connection (a sync handler's transactional ``run.conn``)."""
        with conn.cursor(row_factory=dict_row) as cur, _naming("finish"):
            cur.execute(self._q["finish"], _finish_params(batch))
            return {r["id"]: r["next_retry_at"] for r in cur.fetchall()}

    async def reapply(self, conn: Conn, rows: Sequence[Restore]) -> Row:
        """Put ``rows`` back where the server lacks them (``brought``: rows found in an
        earlier state; ``restored``: rows inserted)."""
        return await self._one(conn, "reapply", _restore_params(rows))

    async def configure_session(
        self,
        conn: Conn,
        statement: timedelta,
        idle: timedelta,
        *,
        local: bool = False,
        handler: bool = False,
    ) -> None:
        """Statement and idle-in-transaction timeouts for the session (or, ``local``, for
        the current transaction only); unless it is a transactional ``handler``'s connection,
        JIT off, timestamps in UTC and ``random_page_cost`` at most 1.1."""
        params = _session_params(statement, idle, local, handler)
        await self._rows(conn, "configure_session", params)

    async def server_state(self, conn: Conn) -> Row:
        """Whether the server ``conn`` reaches takes writes (``in_recovery``, ``read_only``)
        and which it is (``system_identifier``; ``timeline``, None on a standby)."""
        return await self._one(conn, "server_state")

    def server_state_sync(self, conn: psycopg.Connection[Any]) -> Row:
        """:meth:`server_state` on a sync connection."""
        with conn.cursor(row_factory=dict_row) as cur, _naming("server_state"):
            cur.execute(self._q["server_state"])
            row = cur.fetchone()
        assert row is not None
        return row

    def configure_session_sync(
        self,
        conn: psycopg.Connection[Any],
        statement: timedelta,
        idle: timedelta,
        *,
        local: bool = False,
        handler: bool = False,
    ) -> None:
        params = _session_params(statement, idle, local, handler)
        with _naming("configure_session"):
            conn.execute(self._q["configure_session"], params)

    # -- operations ---------------------------------------------------------------------

    async def now(self, conn: Conn) -> datetime:
        return cast(datetime, (await self._one(conn, "now"))["now"])

    async def trigger(
        self,
        conn: Conn,
        job: str,
        scope: Scope,
        plan: datetime,
        *,
        run_now: bool,
        max_attempts: int,
    ) -> Triggered:
        """A manual row of ``scope`` at ``plan`` (a run-now, or a one-off when not
        ``run_now``), or the row that holds it back (``created`` False)."""
        params: dict[str, Any] = {"job": job, "kind": scope.kind, "id": scope.id, "plan": plan}
        params.update(run_now=run_now, max_attempts=max_attempts, lock_ns=self.lock_ns)
        await self.ensure_partitions(conn, [plan])
        for _ in range(3):  # a concurrent trigger may commit between our insert and our read
            async with conn.transaction():
                await self._rows(conn, "lock_trigger_scope", params)
                rows = await self._typed(conn, "trigger", Triggered, params)
            if rows:
                return rows[0]
        raise RuntimeError(f"job {job!r}: could not insert or find the triggered run")

    async def backfill(
        self,
        conn: Conn,
        job: str,
        kinds: list[str],
        ids: list[str],
        plans: list[datetime],
        max_attempts: int,
        *,
        pairs: bool = False,
    ) -> int:
        """PENDING rows for every plan of every scope, or with ``pairs`` for the scope and
        plan at each position of the three lists."""
        params: dict[str, Any] = {"job": job, "kinds": kinds, "ids": ids, "plans": plans}
        params.update(max_attempts=max_attempts, pairs=pairs)
        await self.ensure_partitions(conn, plans)
        return len(await self._rows(conn, "backfill", params))

    async def cancel(self, conn: Conn, execution_id: UUID) -> str:
        """Cancel a PENDING row; returns ``"cancelled"``, the row's status, or ``"missing"``."""
        if await self._rows(conn, "cancel", {"id": execution_id}):
            return "cancelled"
        rows = await self._rows(conn, "execution_status", {"id": execution_id})
        return str(rows[0]["status"]) if rows else "missing"

    async def set_paused(self, conn: Conn, job: str, paused: bool) -> None:
        await self._rows(conn, "set_paused", {"job": job, "paused": paused})

    async def job_summary(self, conn: Conn) -> list[JobStatus]:
        async with conn.transaction():
            await self._rows(conn, "no_jit")
            return await self._typed(conn, "job_summary", JobStatus)

    async def list_runs(self, conn: Conn, chosen: RunFilter, limit: int) -> list[Execution]:
        params = {**chosen.params(), "limit": limit}
        # Planned for the filters given: a generic plan cannot use the index a filter needs
        # (the plan key for a scope, the partial index of a status) and would walk the job's
        # history instead.
        return await self._typed(conn, "list_runs", Execution, params, prepare=_PLAN_EACH_TIME)

    async def get_run(self, conn: Conn, execution_id: UUID) -> RunHistory | None:
        """The execution and its attempts (``get_run``, ``run_attempts``); None if unknown."""
        found = await self._typed(conn, "get_run", Execution, {"id": execution_id})
        if not found:
            return None
        attempts = await self._typed(conn, "run_attempts", Attempt, {"id": execution_id})
        return RunHistory(found[0], tuple(attempts))

    async def failed_attempts(self, conn: Conn, limit: int) -> list[FailedAttempt]:
        return await self._typed(conn, "failed_attempts", FailedAttempt, {"limit": limit})

    @property
    def channel(self) -> str:
        """The LISTEN/NOTIFY channel of this schema (identifiers stop at 63 bytes)."""
        return f"pgsched:{self.schema}"[:63]

    async def notify(self, conn: Conn, payload: str) -> None:
        await self._rows(conn, "notify", {"channel": self.channel, "payload": payload})

    async def listen(self, conn: Conn) -> None:
        await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))


def _ms(duration: timedelta) -> str:
    """``duration`` as a setting's value in milliseconds."""
    return str(int(duration.total_seconds() * 1000))


def _restore_params(rows: Sequence[Restore]) -> dict[str, Any]:
    ordered = sorted(rows, key=lambda r: r.id)  # one lock order, as the finish takes
    outcomes = [r.outcome for r in ordered]
    return {
        "ids": [r.id for r in ordered],
        "jobs": [r.job for r in ordered],
        "kinds": [r.scope_kind for r in ordered],
        "scope_ids": [r.scope_id for r in ordered],
        "plans": [r.plan_time for r in ordered],
        "triggers": [r.trigger for r in ordered],
        "statuses": [r.status for r in ordered],
        "attempts": [r.attempt for r in ordered],
        "max_attempts": [r.max_attempts for r in ordered],
        "runners": [r.runner_id for r in ordered],
        "tokens": [r.token for r in ordered],
        "fencing": [r.fencing_token for r in ordered],
        "exclusive": [r.exclusive for r in ordered],
        "stolen": [r.stolen for r in ordered],
        "payloads": [r.payload_json for r in ordered],
        "started": [r.started_at for r in ordered],
        "stale_timeouts": [r.stale_timeout_s for r in ordered],
        "error_codes": [o.error_code if o else None for o in outcomes],
        "error_msgs": [o.error_msg if o else None for o in outcomes],
        "rows": [o.rows_affected if o else None for o in outcomes],
        "results": [o.result_json if o else None for o in outcomes],
        "durations": [o.duration_ms if o else None for o in outcomes],
        "retry_at": [r.next_retry_at for r in ordered],
    }


def _renewal_params(leases: Sequence[Renewal]) -> dict[str, Any]:
    ordered = sorted(leases)  # one lock order for every batch: no deadlock between them
    return {
        "ids": [lease.id for lease in ordered],
        "tokens": [lease.token for lease in ordered],
        "plans": [lease.plan_time for lease in ordered],
        "stale_timeouts": [lease.stale_timeout_s for lease in ordered],
        **_plan_span(lease.plan_time for lease in ordered),
    }


def _finish_params(batch: Sequence[Finish]) -> dict[str, Any]:
    ordered = sorted(batch, key=lambda f: f.id)  # one lock order for every batch
    return {
        "ids": [f.id for f in ordered],
        "tokens": [f.token for f in ordered],
        "plans": [f.plan_time for f in ordered],
        "statuses": [f.status for f in ordered],
        "error_codes": _column([f.error_code for f in ordered]),
        "error_msgs": _column([f.error_msg for f in ordered]),
        "rows": _column([f.rows_affected for f in ordered]),
        "results": _column([f.result_json for f in ordered]),
        "durations": [f.duration_ms for f in ordered],
        "retry_delays": _column([f.retry_delay_s for f in ordered]),
        "tracebacks": _column([f.traceback for f in ordered]),
        **_plan_span(f.plan_time for f in ordered),
    }


def _column(values: list[Any]) -> list[Any] | None:
    """``values`` as an array parameter, or NULL when every one is NULL (a batch of
    successes has no errors): ``unnest`` reads a NULL array beside others as NULLs, and
    nothing is sent or decoded for it."""
    return values if any(v is not None for v in values) else None


def _plan_span(plans: Iterable[datetime]) -> dict[str, datetime | None]:
    """A batch's first and last plan times: bounds that prune the ledger's partitions before
    a statement runs (None for an empty batch, which matches no row)."""
    listed = list(plans)
    return {"first_plan": min(listed, default=None), "last_plan": max(listed, default=None)}


def _commit_params(idle: timedelta, synchronous: bool) -> dict[str, Any]:
    return {"idle_ms": _ms(idle), "synchronous": synchronous}


def _session_params(
    statement: timedelta, idle: timedelta, local: bool, handler: bool
) -> dict[str, Any]:
    return {
        "statement_ms": str(int(statement.total_seconds() * 1000)),
        "idle_ms": str(int(idle.total_seconds() * 1000)),
        "local": local,
        "handler": handler,
    }


class ScheduleStore(_Statements):
    """Statements on the ``schedules`` table of dynamic jobs (docs/schedules.md)."""

    async def put_schedules(self, conn: Conn, job: str, rows: ScheduleRows) -> int:
        """Upsert ``rows``; returns how many were written (identical ones are not)."""
        params: dict[str, Any] = {"job": job}
        params.update((f.name, getattr(rows, f.name)) for f in fields(rows))
        return await self._rowcount(conn, "put_schedules", params)

    async def analyze_schedules(self, conn: Conn) -> None:
        """Refresh the planner's statistics of the schedules (owner only; skipped else)."""
        await self._rows(conn, "analyze_schedules")

    async def get_schedule(self, conn: Conn, job: str, kind: str, ident: str) -> Row | None:
        rows = await self._rows(conn, "get_schedule", {"job": job, "kind": kind, "id": ident})
        return rows[0] if rows else None

    async def list_schedules(
        self, conn: Conn, job: str, after: tuple[str, str] | None, limit: int
    ) -> list[Row]:
        kind, ident = after if after is not None else (None, None)
        params = {"job": job, "kind": kind, "id": ident, "limit": limit}
        return await self._rows(conn, "list_schedules", params)

    async def delete_schedule(self, conn: Conn, job: str, kind: str, ident: str) -> bool:
        params = {"job": job, "kind": kind, "id": ident}
        return bool(await self._rows(conn, "delete_schedule", params))

    async def set_schedule_paused(
        self, conn: Conn, job: str, kind: str, ident: str, paused: bool
    ) -> bool:
        params = {"job": job, "kind": kind, "id": ident, "paused": paused}
        return bool(await self._rows(conn, "set_schedule_paused", params))

    async def due_schedules(
        self, conn: Conn, terms: ClaimTerms, delay: timedelta, limit: int
    ) -> list[DueSchedule]:
        """Lock up to ``limit`` due schedules of the job (SKIP LOCKED), oldest next plan first."""
        params = {**terms.params(), "delay": delay, "limit": limit}
        return await self._tuples(
            conn, "due_schedules", DueSchedule, params, prepare=_PLAN_EACH_TIME
        )

    async def claim_schedules(
        self, conn: Conn, terms: ClaimTerms, moves: Sequence[ScheduleMove], tids: Sequence[str]
    ) -> tuple[list[WonPlan], int]:
        """Insert RUNNING rows for the moves with a plan, and move each schedule's next plan
        on (``tids``: where due_schedules read each move's schedule, in the same order);
        returns the rows this replica won, and how many schedules were not where it read
        them."""
        params = {
            **terms.params(),
            "kinds": [m.kind for m in moves],
            "ids": [m.id for m in moves],
            "plans": [m.plan for m in moves],
            "nexts": [m.next_plan for m in moves],
            "tids": list(tids),
            **_plan_span(m.plan for m in moves if m.plan is not None),
        }
        won = await self._tuples(conn, "claim_schedules", WonPlan, params, prepare=_PLAN_EACH_TIME)
        return [plan for plan in won if plan.id is not None], won[0].unmoved


class TaskStore(_Statements):
    """Statements about the tasks executions sent to a consumer (``pgsched.celery.track``)."""

    async def record_task_attempt(
        self, conn: Conn, execution_id: UUID, attempt: TaskAttempt
    ) -> RecordedTask | None:
        """Keep a consumer's run as an attempt (a final outcome of a Celery job's task becomes
        the execution's status); None if no such execution."""
        params: dict[str, Any] = {"id": execution_id}
        params.update((f.name, getattr(attempt, f.name)) for f in fields(attempt))
        rows = await self._rows(conn, "record_task_attempt", params)
        if not rows:
            return None
        row = rows[0]
        return RecordedTask(int(row["attempt"]), row["execution_status"], row["changed"])

    async def settle_task(self, conn: Conn, execution_id: UUID) -> RecordedTask | None:
        """The newest final outcome kept for the execution becomes its status, when its row
        allows; None if no such execution."""
        rows = await self._rows(conn, "settle_task", {"id": execution_id})
        if not rows:
            return None
        return RecordedTask(None, rows[0]["execution_status"], rows[0]["changed"])

    async def previous_task(
        self, conn: Conn, job: str, scope: Scope, plan_time: datetime, lost_after: float
    ) -> PreviousTask | None:
        """The scope's newest earlier plan whose task was sent, and whether it has an outcome."""
        params = {
            "job": job,
            "kind": scope.kind,
            "scope_id": scope.id,
            "plan": plan_time,
            "lost_after": lost_after,
        }
        rows = await self._rows(conn, "previous_task", params)
        if not rows:
            return None
        row = rows[0]
        return PreviousTask(row["id"], row["outcome"], float(row["left_s"]))
