"""The ledger partitioned on plan_time (migrations 12-14): the upgrade of a ledger written by
version 11 while its replicas keep writing, partitions made on demand for any plan time, and
retention that drops whole partitions but never an unfinished row."""

from __future__ import annotations

import asyncio
import textwrap
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

import pgsched
from pgsched import Admin
from pgsched._engine import figures as figures_module
from pgsched._engine.figures import LedgerFigures
from pgsched._storage.connection import connect_options
from pgsched._storage.statements import migration_files
from pgsched._storage.store import Store
from tests.integration.conftest import SchedulerFactory
from tests.support.migrations import migrate_to as _migrate_to
from tests.support.replica import Replica, clean_env
from tests.support.rows import (
    count,
    db_now,
    estimated_rows,
    insert_row,
    partition_holding,
    partition_of,
    row_by_id,
    seed_running,
    table,
)
from tests.support.threads import run_together
from tests.support.waiting import wait_until
from tests.unit.engine_fakes import claim

DAY = timedelta(days=1)


class _Version11Writer(threading.Thread):
    """What a replica of version 11 keeps doing during the upgrade: claims (INSERT ... ON
    CONFLICT DO NOTHING of RUNNING rows, by the table's name), terminal writes and heartbeats
    by id under its lease token."""

    def __init__(self, dsn: str, schema: str, held: dict[str, Any]) -> None:
        super().__init__(daemon=True)
        self.dsn, self.schema, self.held = dsn, schema, held
        self.stop = threading.Event()
        self.written: list[UUID] = []
        self.errors: list[BaseException] = []

    def run(self) -> None:
        ledger = table(self.schema)
        claim = sql.SQL(
            "INSERT INTO {} (job_name, scope_kind, scope_id, plan_time, trigger, status,"
            " runner_id, heartbeat_at, stale_after, started_at)"
            " VALUES ('writer', 'n', %s, date_trunc('second', clock_timestamp()), 'schedule',"
            " 'RUNNING', 'v11', clock_timestamp(), clock_timestamp() + interval '1 minute',"
            " clock_timestamp()) ON CONFLICT DO NOTHING RETURNING id, lease_token"
        ).format(ledger)
        finish = sql.SQL(
            "UPDATE {} SET status = 'SUCCESS', finished_at = clock_timestamp()"
            " WHERE id = %s AND lease_token = %s AND status = 'RUNNING' RETURNING id"
        ).format(ledger)
        beat = sql.SQL(
            "UPDATE {} SET heartbeat_at = clock_timestamp(),"
            " stale_after = clock_timestamp() + interval '10 minutes'"
            " WHERE id = %s AND lease_token = %s AND status = 'RUNNING' RETURNING id"
        ).format(ledger)
        n = 0
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    n += 1
                    got = conn.execute(claim, (str(n),)).fetchone()
                    assert got is not None, "a claim of a new scope found its plan taken"
                    done = conn.execute(finish, got).fetchone()
                    assert done is not None, "a terminal write lost its row"
                    self.written.append(got[0])
                    held = (self.held["id"], self.held["lease_token"])
                    assert conn.execute(beat, held).fetchone() is not None, "a heartbeat missed"
                    time.sleep(0.01)
        except BaseException as exc:
            self.errors.append(exc)


APP = textwrap.dedent(
    """
    import pgsched

    scheduler = pgsched.Scheduler(tick_interval="0.2s")

    @scheduler.job(every="1h", max_attempts=1)
    def beat(run):
        return 1
    """
)


def test_upgrade_in_place_while_a_replica_of_version_11_writes(
    pg_dsn: str, schema: str, db: Any, tmp_path: Path
) -> None:
    _migrate_to(pg_dsn, schema, "0011")
    now = db_now(db)
    history = [
        insert_row(
            db,
            schema,
            job_name="old",
            scope_kind="shard",
            scope_id=str(i),
            plan_time=now - 3 * DAY + i * timedelta(minutes=1),
            status="SUCCESS",
            finished_at=now - 3 * DAY,
        )
        for i in range(200)
    ]
    # beat's scope is held by a replica of version 11 (live lease, overlap="forbid")...
    running = seed_running(
        db,
        schema,
        "beat",
        now - timedelta(minutes=1),
        stale_in=timedelta(minutes=10),
        runner_id="v11",
    )
    # ...with a backfilled plan due, and a one-off planned forty days ahead
    pending = insert_row(
        db, schema, job_name="beat", plan_time=now - 2 * DAY, status="PENDING", trigger="backfill"
    )
    ahead = insert_row(
        db, schema, job_name="beat", plan_time=now + 40 * DAY, status="PENDING", trigger="manual"
    )

    writer = _Version11Writer(pg_dsn, schema, running)
    writer.start()
    wait_until(lambda: len(writer.written) >= 20 or writer.errors, 30, "version 11 to write")
    migrators = [pgsched.Scheduler(dsn=pg_dsn, schema=schema, runner_id=f"m{i}") for i in range(4)]
    applied = run_together([m.migrate for m in migrators])
    wait_until(lambda: len(writer.written) >= len(history) or writer.errors, 30, "more writes")
    writer.stop.set()
    writer.join(30)
    assert writer.errors == [], writer.errors
    upgraded = _versions_from("0012")  # the upgrade from version 11: every later migration
    assert sorted(v for a in applied for v in a) == upgraded, applied

    # Partitioned, the old table attached whole as the first partition; nothing lost.
    kind = db.execute(
        "SELECT relkind FROM pg_class WHERE oid = to_regclass(%s)",
        (sql.Identifier(schema, "cron_executions").as_string(db),),
    ).fetchone()
    assert kind == ("p",)
    legacy = db.execute(
        sql.SQL("SELECT lo = '-infinity' FROM {} WHERE name = 'cron_executions_legacy'").format(
            table(schema, "cron_partitions")
        )
    ).fetchone()
    assert legacy == (True,), "the old table is the partition of every plan before the upgrade"
    assert count(db, schema, "job_name = 'writer'") == len(writer.written)
    assert count(db, schema, "job_name = 'writer' AND status = 'SUCCESS'") == len(writer.written)
    assert count(db, schema, "job_name = 'old' AND status = 'SUCCESS' AND attempt = 1") == 200
    admin = Admin(dsn=pg_dsn, schema=schema)
    try:
        for seeded in (*history[:3], running, pending, ahead, {"id": writer.written[-1]}):
            assert admin.run(seeded["id"]).execution.id == seeded["id"]
        moved = row_by_id(db, schema, ahead["id"])
        assert (moved["status"], moved["plan_time"]) == ("PENDING", ahead["plan_time"])

        # A replica of this version: waits for the scope the old replica holds, then runs the
        # backfilled plan once; the old replica's lease still ends by id and token.
        (tmp_path / "app.py").write_text(APP)
        env = clean_env({"PGSCHED_DSN": pg_dsn, "PGSCHED_SCHEMA": schema})
        replica = Replica.run("app.py", "v12", cwd=tmp_path, env=env)
        try:
            replica.http_port()
            time.sleep(1.5)
            assert count(db, schema, "job_name = 'beat' AND status = 'RUNNING'") == 1
            db.execute(
                sql.SQL(
                    "UPDATE {} SET status = 'SUCCESS', finished_at = clock_timestamp()"
                    " WHERE id = %s AND lease_token = %s AND status = 'RUNNING'"
                ).format(table(schema)),
                (running["id"], running["lease_token"]),
            )
            wait_until(
                lambda: row_by_id(db, schema, pending["id"])["status"] == "SUCCESS",
                30,
                "the backfilled plan to run",
            )
            assert replica.stop() == 0
        finally:
            replica.kill()
        assert row_by_id(db, schema, pending["id"])["attempt"] == 1
        assert row_by_id(db, schema, running["id"])["status"] == "SUCCESS"
        admin.cancel(ahead["id"])
        assert row_by_id(db, schema, ahead["id"])["status"] == "CANCELLED"
        assert count(db, schema, "job_name = 'old' AND status = 'SUCCESS' AND attempt = 1") == 200
    finally:
        admin.close()


def test_any_plan_time_gets_a_partition_and_retention_drops_only_finished_ones(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler(role="owner")
    s.register(lambda run: None, name="far", every="1d", max_attempts=1)
    now = db_now(db)
    years_back = now.replace(microsecond=0) - timedelta(days=3 * 365)
    assert s.backfill("far", start=years_back, end=years_back + 2 * DAY) >= 2
    ahead = s.trigger("far", at=now + timedelta(days=900))
    assert ahead.created and ahead.id is not None
    backfilled = [r["id"] for r in _rows_where(db, migrated, "trigger = 'backfill'")]
    held = {partition_holding(db, migrated, ident) for ident in backfilled}
    assert len(backfilled) >= 2 and "cron_executions_default" not in held, held
    assert partition_holding(db, migrated, ahead.id) not in (None, "cron_executions_default")
    # a finished partition and one with a PENDING row, both older than the cutoff
    done_at = now - 10 * DAY
    insert_row(db, migrated, job_name="far", plan_time=done_at, status="SUCCESS", finished_at=now)
    db.execute(
        sql.SQL("SELECT {}(ARRAY[%s::timestamptz])").format(
            sql.Identifier(migrated, "cron_ensure_partitions")
        ),
        (done_at - DAY,),
    )
    gone = insert_row(
        db, migrated, job_name="far", plan_time=done_at - DAY, status="SUCCESS", finished_at=now
    )
    assert s.prune("5d") >= 1
    assert count(db, migrated, "id = %s", (gone["id"],)) == 0
    assert count(db, migrated, "trigger = 'backfill' AND status = 'PENDING'") >= 2, "kept"
    names = {p[0] for p in _partitions(db, migrated)}
    assert held <= names, "the backfill's partitions hold PENDING rows: kept"
    assert admin_run_ok(s, ahead.id)


def admin_run_ok(s: pgsched.Scheduler, ident: UUID) -> bool:
    return s.admin.run(ident).execution.id == ident


def _partitions(db: Any, schema: str) -> list[tuple[str, datetime, datetime]]:
    return [
        tuple(r)
        for r in db.execute(
            sql.SQL("SELECT name, lo, hi FROM {} ORDER BY lo").format(
                table(schema, "cron_partitions")
            )
        ).fetchall()
    ]


def _rows_where(db: psycopg.Connection[Any], schema: str, where: str) -> list[Any]:
    with db.cursor(row_factory=dict_row) as cur:
        cur.execute(sql.SQL("SELECT * FROM {} WHERE ").format(table(schema)) + sql.SQL(where))
        return cur.fetchall()


def test_dropping_the_created_index_makes_way_while_a_transaction_holds_the_ledger(
    pg_dsn: str, schema: str, db: Any
) -> None:
    # Migration 0017 drops an index of the ledger (an ACCESS EXCLUSIVE lock). A transactional
    # run holds the ledger for its whole run; a lock request queued behind it would hold up
    # every replica's statement until the run ends. The migration's request waits a second
    # at a time, each try a statement of its own (a 2 s statement_timeout here does not end
    # the migration however long the run holds the ledger).
    _migrate_to(pg_dsn, schema, "0016")
    created_idx = f"{schema}.cron_executions_created_idx"
    waiting = sql.SQL(
        "SELECT count(*) FROM pg_locks WHERE relation = {}::regclass"
        " AND mode = 'AccessExclusiveLock' AND NOT granted"
    ).format(sql.Literal(f"{schema}.cron_executions"))
    migrator = pgsched.Scheduler(dsn=pg_dsn, schema=schema, statement_timeout="2s")
    outcome: list[Any] = []

    def migrate() -> None:
        try:
            outcome.append(migrator.migrate())
        except Exception as exc:  # shown by the assertion below
            outcome.append(exc)

    with psycopg.connect(pg_dsn) as holder, psycopg.connect(pg_dsn, autocommit=True) as reader:
        insert_row(holder, schema, job_name="long", plan_time=db_now(db), status="RUNNING")
        migrating = threading.Thread(target=migrate)
        migrating.start()
        wait_until(lambda: db.execute(waiting).fetchone()[0] == 1, 30, "the migration's lock try")
        reader.execute("SET statement_timeout = '3s'")
        started = time.monotonic()
        while time.monotonic() - started < 5:
            # QueryCanceled if the migration's lock request stays queued ahead of it
            reader.execute(sql.SQL("SELECT count(*) FROM {}").format(table(schema))).fetchone()
        assert outcome == [], outcome
        assert db.execute("SELECT to_regclass(%s)", (created_idx,)).fetchone()[0] is not None
        holder.commit()
        migrating.join(30)
    assert outcome == [_versions_from("0017")], outcome
    assert db.execute("SELECT to_regclass(%s)", (created_idx,)).fetchone()[0] is None


async def _tick_probes(dsn: str, schema: str, *, pooled: bool) -> list[tuple[int, int]]:
    """Three ticks' probes on one connection; the (generic, custom) plans the server made
    for it, if it kept it as a prepared statement."""
    store = Store(schema)
    options = connect_options(dsn, "test", transaction_pooling=pooled)
    async with await psycopg.AsyncConnection.connect(dsn, **options) as conn:
        clock = None
        for _ in range(3):
            probe = await store.tick_probe(conn, ["j"], (), clock)
            clock = probe.now
        cur = await conn.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE %s",
            ("%One statement per tick%",),
        )
        return sorted((int(g), int(c)) for g, c in await cur.fetchall())


def test_the_tick_probe_is_planned_once_per_connection(pg_dsn: str, migrated: str) -> None:
    """Planning the probe's reads of every partition cost more than running them, at every
    tick (9-18 ms at 41 partitions): it is prepared with one generic plan. Behind a
    transaction pooler nothing is prepared, and it is planned each time as before."""
    # one prepared statement for the first tick's probe (no clock yet), one for the others
    assert asyncio.run(_tick_probes(pg_dsn, migrated, pooled=False)) == [(1, 0), (2, 0)]
    assert asyncio.run(_tick_probes(pg_dsn, migrated, pooled=True)) == []


def test_a_first_claim_into_a_partition_gives_the_planner_its_figures(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    """A partition made ahead has no figures until it is analyzed. On its first day, the
    claims' check of each scope for a RUNNING row took the index of (job, plan time) for as
    cheap as the one of RUNNING rows, and read every row of the job in the partition, until
    autovacuum analyzed it (up to a minute later). An owner's first claim into such a partition
    analyzes it; a runtime role's claims go on without (the server skips it: not its table)."""
    scopes = [pgsched.Scope("t", str(i)) for i in range(20)]
    runtime = make_scheduler("r1", max_concurrency=20)
    runtime.register(lambda run: None, name="a", every="1h", scopes=scopes)
    report = runtime.run_once()
    assert (report.claimed, report.errors) == (20, 0)
    assert estimated_rows(db, migrated, partition_of(db, migrated, "a")) <= 0

    owner = make_scheduler("r2", role="owner", max_concurrency=20)
    owner.register(lambda run: None, name="b", every="1h", scopes=scopes)
    report = owner.run_once()
    assert (report.claimed, report.errors) == (20, 0)
    part = partition_of(db, migrated, "b")
    found = db.execute(sql.SQL("SELECT count(*) FROM {}").format(table(migrated, part)))
    held = found.fetchone()[0]
    assert held >= 20
    assert estimated_rows(db, migrated, part) == held  # its rows as the claim left them


async def _claimed_into(dsn: str, figures: LedgerFigures, plan: datetime) -> None:
    """What the engine does after a claim that won one row at ``plan``."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await figures.after_claim(conn, [claim(plan=plan)])


def test_a_partition_that_outgrew_its_figures_is_analyzed_again(
    owner_dsn: str, migrated: str, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A statement planned once per connection (the tick's probe, a prepared one) keeps the
    plan made on the figures of when it was planned until the partition is analyzed again: a
    probe planned on a partition of 64 rows read the day's 20,000 at every tick (16 ms) until
    autovacuum came, or never with autovacuum off. A claim into a partition with four times the
    pages of its figures has it analyzed, after this replica claimed enough to look again."""
    monkeypatch.setattr(figures_module, "LOOK_AGAIN_AFTER", 1)
    plan = db_now(db).replace(microsecond=0)  # one plan time: one partition
    filler = sql.SQL(
        "INSERT INTO {} (job_name, scope_kind, scope_id, plan_time, trigger, status)"
        " SELECT 'filler', 't', %s || g, %s, 'schedule', 'SUCCESS'"
        " FROM generate_series(1, %s) g"
    ).format(table(migrated))
    db.execute(filler, ("a", plan, 20))
    part = partition_of(db, migrated, "filler")
    # the figures seen are the replica's alone: autovacuum would analyze it too
    db.execute(
        sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = false)").format(table(migrated, part))
    )
    figures = LedgerFigures(Store(migrated))
    asyncio.run(_claimed_into(owner_dsn, figures, plan))
    assert estimated_rows(db, migrated, part) == 20  # its first figures

    db.execute(filler, ("b", plan, 5_000))
    asyncio.run(_claimed_into(owner_dsn, figures, plan))  # the one row since: looks again
    assert estimated_rows(db, migrated, part) == 5_020

    db.execute(filler, ("c", plan, 100))  # not four times the pages: left to autovacuum
    asyncio.run(_claimed_into(owner_dsn, figures, plan))
    assert estimated_rows(db, migrated, part) == 5_020


def _versions_from(first: str) -> list[str]:
    """The versions of the migrations shipped, from ``first`` on."""
    return [version for version, _, _ in migration_files() if version >= first]
