"""The cluster of real replicas the HTTP tests (``tests/acceptance/http``) share, and what
they read it with: the README's "HTTP and metrics" as a replica serves it.

One cluster per worker serves every test of the package (``conftest.py``): four real
``pgsched run`` subprocesses (``python -m pgsched``) on ports they pick themselves
(``--http-port 0``, read back from the ``http_listening`` log line), against the tests'
PostgreSQL:

- ``main``: the APP below on a migrated schema, with ``PGSCHED_HTTP_TOKEN`` set;
- ``quiet``: another APP on the same schema, with no token in its environment;
- ``nomig``: the quiet APP on a schema that was never migrated (and no ``--migrate``);
- ``old``: the quiet APP on a schema that only has the first migration (as an older pgsched
  left it), again without ``--migrate``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from tests.support.replica import Replica, clean_env
from tests.support.waiting import wait_until

TOKEN = f"tok-{uuid.uuid4().hex}"
SCOPE_ID = "acme-7"  # the scope of the `tick` job: it must never become a metric label
HOSTILE_SCOPE = "<script>alert(1)</script>"
HOSTILE_ERROR = "<img src=x onerror=alert(2)>"
HOSTILE_JOB = "evil<b>job</b>"
SEEDED_GAP_S = 100  # a schedule row of `tick` this many seconds before the replica starts

APP = textwrap.dedent(
    f"""
    import asyncio, os, time
    import psycopg
    from psycopg import sql
    import pgsched

    SCHEMA = os.environ["PGSCHED_SCHEMA"]
    scheduler = pgsched.Scheduler(tick_interval="0.5s", max_concurrency=8)

    def record(run, note):
        with psycopg.connect(os.environ["PGSCHED_DSN"], autocommit=True) as conn:
            conn.execute(
                sql.SQL("INSERT INTO {{}}.ledger (job, execution_id, note) VALUES (%s, %s, %s)")
                .format(sql.Identifier(SCHEMA)),
                (run.job, str(run.execution_id), note),
            )

    @scheduler.job(every="1s", scopes=[pgsched.Scope("tenant", {SCOPE_ID!r})])
    def tick(run):
        return 1

    @scheduler.job(every="1s", max_attempts=1)
    def boom(run):
        raise RuntimeError({HOSTILE_ERROR!r})

    @scheduler.job(every="1h")
    def hourly(run):
        return 1

    @scheduler.job(every="1h")
    def pausable(run):
        return 1

    @scheduler.job(every="1h", run_timeout="20s", stale_timeout="30s", heartbeat_interval="0.5s")
    async def lossy(run):
        if run.trigger != "manual":
            return 0
        deadline = time.monotonic() + 15
        while not run.lease_lost and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        # Synchronous on purpose: nothing else runs on the loop between this commit and the
        # scheduler's handling of the return, so a scrape after the ledger row sees it all.
        record(run, "lost" if run.lease_lost else "kept")
        return 0
    """
)

QUIET_APP = textwrap.dedent(
    """
    import pgsched

    scheduler = pgsched.Scheduler(tick_interval="0.5s")

    @scheduler.job(every="1h")
    def quiet(run):
        return 1
    """
)

MAIN_JOBS = ("tick", "boom", "hourly", "pausable", "lossy")

# The README's metric table: family name as the text parser reports it -> (type, label names,
# sample name).
EXPECTED_METRICS = {
    "pgsched_runs": ("counter", {"job", "status"}, "pgsched_runs_total"),
    "pgsched_run_duration_seconds": ("histogram", {"job"}, "pgsched_run_duration_seconds_count"),
    "pgsched_claims": ("counter", {"job", "outcome"}, "pgsched_claims_total"),
    "pgsched_running_stale": ("gauge", {"job"}, "pgsched_running_stale"),
    "pgsched_failed_runs": ("gauge", {"job"}, "pgsched_failed_runs"),
    "pgsched_last_success_timestamp_seconds": (
        "gauge",
        {"job"},
        "pgsched_last_success_timestamp_seconds",
    ),
    "pgsched_plans_skipped": ("counter", {"job", "reason"}, "pgsched_plans_skipped_total"),
    "pgsched_leases_lost": ("counter", {"job"}, "pgsched_leases_lost_total"),
    "pgsched_tick_duration_seconds": ("histogram", set(), "pgsched_tick_duration_seconds_count"),
}


@dataclass
class Cluster:
    dsn: str
    schema: str
    unmigrated: str
    conn: psycopg.Connection[Any]
    main: Replica
    quiet: Replica
    nomig: Replica
    old: Replica
    runner: str = "http-main"
    replicas: list[Replica] = field(default_factory=list)

    def q(self, text: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        """Run ``text`` with ``{s}`` standing for the cluster's schema."""
        cur = self.conn.execute(sql.SQL(text).format(s=sql.Identifier(self.schema)), params)
        return cur.fetchall() if cur.description else []

    def one(self, text: str, params: tuple[Any, ...] = ()) -> Any:
        return self.q(text, params)[0][0]


def migrate(dsn: str, schema: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pgsched", "--dsn", dsn, "--schema", schema, "migrate"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _apply_first_migration_only(conn: psycopg.Connection[Any], schema: str) -> None:
    """What an older pgsched's ``migrate`` left: version 0001 and its bookkeeping only."""
    migrations = Path(__file__).resolve().parents[3] / "sql" / "migrations"
    first = sorted(migrations.glob("0001_*.sql"))[0]
    ident = sql.Identifier(schema)
    with conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        conn.execute(
            sql.SQL(
                "CREATE TABLE {}.schema_migrations (version text PRIMARY KEY, name text NOT NULL,"
                " applied_at timestamptz NOT NULL DEFAULT clock_timestamp())"
            ).format(ident)
        )
        conn.execute(sql.SQL(first.read_text()).format(schema=ident))
        conn.execute(
            sql.SQL("INSERT INTO {}.schema_migrations (version, name) VALUES ('0001', %s)").format(
                ident
            ),
            (first.stem.partition("_")[2],),
        )


def _prepare(conn: psycopg.Connection[Any], dsn: str, schema: str, old_schema: str) -> None:
    """The main schema migrated, with the ledger and an old plan of ``tick``; the old one
    with the first migration only."""
    migrate(dsn, schema)
    _apply_first_migration_only(conn, old_schema)
    s = sql.Identifier(schema)
    conn.execute(
        sql.SQL(
            "CREATE TABLE {}.ledger (job text, execution_id uuid, note text,"
            " at timestamptz DEFAULT clock_timestamp())"
        ).format(s)
    )
    # An old schedule row of `tick`: the replica's first claim supersedes the plans since.
    conn.execute(
        sql.SQL(
            "INSERT INTO {}.cron_executions (job_name, scope_kind, scope_id, plan_time,"
            " trigger, status, runner_id, started_at, finished_at)"
            " SELECT 'tick', 'tenant', %s, p, 'schedule', 'SUCCESS', 'seed', p, p"
            " FROM (SELECT date_trunc('second', clock_timestamp())"
            "       - make_interval(secs => %s) AS p) AS x"
        ).format(s),
        (SCOPE_ID, SEEDED_GAP_S),
    )


def _start(workdir: Path, app: str, runner_id: str, dsn: str, schema: str, **env: str) -> Replica:
    return Replica.run(
        app,
        runner_id,
        cwd=workdir,
        env=clean_env({"PGSCHED_DSN": dsn, "PGSCHED_SCHEMA": schema, **env}),
    )


def _start_all(workdir: Path, dsn: str, schemas: tuple[str, str, str]) -> list[Replica]:
    """main, quiet, nomig and old (see the module's docstring), each answering HTTP."""
    schema, unmigrated, old_schema = schemas
    # nomig's and old's ticks fail by design; /healthz turns 503 once they have failed for
    # the health timeout (20 s by default), and the tests of the package (and the check at
    # their end) take longer than that on a busy worker: an hour keeps them alive throughout.
    failing = {"PGSCHED_HEALTH_TIMEOUT": "1h"}
    replicas = [
        _start(workdir, "app.py", "http-main", dsn, schema, PGSCHED_HTTP_TOKEN=TOKEN),
        _start(workdir, "quiet_app.py", "http-quiet", dsn, schema),  # no token at all
        _start(
            workdir, "quiet_app.py", "http-nomig", dsn, unmigrated, PGSCHED_HTTP_TOKEN="", **failing
        ),
        _start(workdir, "quiet_app.py", "http-old", dsn, old_schema, **failing),
    ]
    try:
        for replica in replicas:
            listening = replica.wait_event("http_listening")
            assert listening["host"] == "127.0.0.1"  # nobody passed --http-host
            replica.http_port()
    except BaseException:
        for replica in replicas:
            replica.stop()
        raise
    return replicas


@contextmanager
def running_cluster(dsn: str, workdir: Path) -> Iterator[Cluster]:
    """The cluster, once the main replica has ticked and recorded its jobs; stopped after,
    its schemas dropped."""
    (workdir / "app.py").write_text(APP)
    (workdir / "quiet_app.py").write_text(QUIET_APP)
    tag = uuid.uuid4().hex[:10]
    schemas = (f"t_http_{tag}", f"t_http_{tag}_nomig", f"t_http_{tag}_v1")
    conn = psycopg.connect(dsn, autocommit=True)
    replicas: list[Replica] = []
    try:
        _prepare(conn, dsn, schemas[0], schemas[2])
        replicas = _start_all(workdir, dsn, schemas)
        main, quiet, nomig, old = replicas
        cluster = Cluster(dsn, schemas[0], schemas[1], conn, main, quiet, nomig, old)
        cluster.replicas = replicas
        main = cluster.main
        wait_until(
            lambda: (
                main.check_alive()
                and cluster.one(
                    "SELECT count(*) FROM {s}.job_state WHERE job_name = ANY(%s)",
                    ([*MAIN_JOBS, "quiet"],),
                )
                == len(MAIN_JOBS) + 1
            ),
            20,
            # The quiet replica's job too: a test run first reads both replicas' jobs.
            "the main and quiet replicas' jobs in job_state",
        )
        yield cluster
        # Checked when the package's tests are done, not by a test meant to run last: neither
        # a shuffled order nor a worker that steals the tail of the tests keeps a test last.
        _everything_left_the_replicas_answering_and_they_exit_cleanly(cluster)
    finally:
        for replica in replicas:
            replica.stop()
        for name in schemas:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        conn.close()


def _everything_left_the_replicas_answering_and_they_exit_cleanly(cluster: Cluster) -> None:
    for replica in cluster.replicas:
        assert replica.check_alive(), replica.name
        assert replica.get("/healthz").status == 200, replica.name
    started = time.monotonic()
    assert cluster.main.stop() == 0
    # guard against an order-of-magnitude regression (its handlers return at once: normally a
    # prompt exit), not a performance claim: those live in bench/
    assert time.monotonic() - started < 20


class Scrape:
    """One parsed ``/metrics`` answer."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}

    def value(self, sample: str, **labels: str) -> float | None:
        family = next(
            (f for f in self.families.values() if any(s.name == sample for s in f.samples)), None
        )
        if family is None:
            return None
        for s in family.samples:
            if s.name == sample and s.labels == labels:
                return float(s.value)
        return None

    def v(self, sample: str, **labels: str) -> float:
        """Like :meth:`value`, with an absent series read as 0."""
        found = self.value(sample, **labels)
        return 0.0 if found is None else found


def scrape(replica: Replica) -> Scrape:
    resp = replica.get("/metrics")
    assert resp.status == 200, resp.text
    assert resp.headers["Content-Type"].startswith("text/plain"), resp.headers["Content-Type"]
    return Scrape(resp.text)


def seed_job(c: Cluster, job: str) -> None:
    c.q("INSERT INTO {s}.job_state (job_name) VALUES (%s) ON CONFLICT DO NOTHING", (job,))


def seed_run(
    c: Cluster,
    job: str,
    status: str,
    *,
    scope_id: str = "global",
    ago_s: int = 300,
    stale_in_s: int | None = None,
    retry_in_s: int | None = None,
    finished_ago_s: int | None = None,
) -> Any:
    """Insert one row as another (gone) replica would have left it; returns its id."""
    return c.one(
        "INSERT INTO {s}.cron_executions (job_name, scope_kind, scope_id, plan_time, trigger,"
        " status, runner_id, started_at, heartbeat_at, stale_after, next_retry_at,"
        " finished_at, attempt, max_attempts)"
        " SELECT %s, CASE WHEN %s = 'global' THEN 'global' ELSE 'tenant' END, %s,"
        "   n - make_interval(secs => %s), 'schedule', %s, 'gone-replica',"
        "   n - make_interval(secs => %s), n - make_interval(secs => %s),"
        "   n + make_interval(secs => %s), n + make_interval(secs => %s),"
        "   n - make_interval(secs => %s), 1, %s"
        " FROM (SELECT clock_timestamp() AS n) AS now RETURNING id",
        (
            job,
            scope_id,
            scope_id,
            ago_s,
            status,
            ago_s,
            ago_s,
            stale_in_s,
            retry_in_s,
            finished_ago_s,
            2 if retry_in_s is not None else 1,
        ),
    )


def stable(read: Any, timeout: float = 15, what: str = "") -> Any:
    """Wait until ``read()`` gives the same answer twice in a row; returns it.

    Used for "counter == rows in the database" checks: the counter is bumped just after the
    row commits, so the two agree whenever no claim or run is in flight.
    """
    last: list[Any] = []

    def settled() -> bool:
        now = read()
        same = bool(last) and last[-1] == now and now[0]
        last.append(now)
        return same

    def missing() -> str:
        return f"{what or 'a stable reading'}; the last two readings: {last[-2:]}"

    wait_until(settled, timeout, missing, interval=0.05)
    return last[-1]
