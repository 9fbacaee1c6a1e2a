"""The HTTP side of a real replica (the README's "HTTP and metrics"): metrics and their
values, probes, the status page, the JSON API and its bearer-token guard, and the default bind
address.

One module-scoped cluster serves every test: three real ``pgsched run`` subprocesses
(``python -m pgsched``) on ports they pick themselves (``--http-port 0``, read back from the
``http_listening`` log line), against the tests' PostgreSQL:

- ``main``: the APP below on a migrated schema, with ``PGSCHED_HTTP_TOKEN`` set;
- ``quiet``: another APP on the same schema, with no token in its environment;
- ``nomig``: the quiet APP on a schema that was never migrated (and no ``--migrate``);
- ``old``: the quiet APP on a schema that only has the first migration (as an older pgsched
  left it), again without ``--migrate``.
"""

from __future__ import annotations

import html
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families
from psycopg import sql

from pgsched._gauges import CACHE_TTL_S
from tests.acceptance.conftest import spawn_pgsched
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

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


# -- plumbing -----------------------------------------------------------------------------

# No proxy: a proxy from the environment must not carry requests meant for 127.0.0.1.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass
class Response:
    status: int
    headers: Any
    text: str

    def json(self) -> Any:
        return json.loads(self.text)


def http(
    method: str,
    url: str,
    *,
    body: Any = None,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10,
) -> Response:
    """One real HTTP request; error statuses are returned, not raised."""
    data = None
    all_headers = dict(headers or {})
    if isinstance(body, bytes):
        data = body
    elif body is not None:
        data = json.dumps(body).encode()
        all_headers.setdefault("Content-Type", "application/json")
    if token is not None:
        all_headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=all_headers)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            return Response(resp.status, resp.headers, resp.read().decode())
    except urllib.error.HTTPError as err:
        with err:
            return Response(err.code, err.headers, err.read().decode())


class Replica:
    """A ``pgsched run`` subprocess whose merged output is pumped into ``lines``."""

    def __init__(self, name: str, args: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.name = name
        self.proc = spawn_pgsched(args, cwd, env)
        self.lines: list[str] = []
        self._pump = threading.Thread(target=self._read, name=f"pump-{name}", daemon=True)
        self._pump.start()
        self.port = 0

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def output(self) -> str:
        return "".join(self.lines)

    def events(self, name: str) -> list[dict[str, Any]]:
        found = []
        for line in list(self.lines):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and event.get("event") == name:
                found.append(event)
        return found

    def alive(self) -> bool:
        if self.proc.poll() is not None:
            self._pump.join(5)
            raise AssertionError(
                f"replica {self.name} exited with {self.proc.returncode}:\n{self.output()[-4000:]}"
            )
        return True

    def wait_listening(self, timeout: float = 30) -> int:
        event = wait_until(
            lambda: self.alive() and self.events("http_listening"),
            timeout,
            f"replica {self.name}'s http_listening log event",
        )[0]
        assert event["host"] == "127.0.0.1"  # nobody passed --http-host
        self.port = int(event["port"])
        assert self.port > 0
        return self.port

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str, **kw: Any) -> Response:
        return http("GET", self.url(path), **kw)

    def post(self, path: str, **kw: Any) -> Response:
        return http("POST", self.url(path), **kw)

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._pump.join(5)
        return self.proc.returncode


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


def _migrate(dsn: str, schema: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "pgsched", "--dsn", dsn, "--schema", schema, "migrate"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )


def _apply_first_migration_only(conn: psycopg.Connection[Any], schema: str) -> None:
    """What an older pgsched's ``migrate`` left: version 0001 and its bookkeeping only."""
    migrations = Path(__file__).resolve().parents[2] / "sql" / "migrations"
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
        conn.execute(sql.SQL(first.read_text()).format(schema=ident))  # type: ignore[arg-type]
        conn.execute(
            sql.SQL("INSERT INTO {}.schema_migrations (version, name) VALUES ('0001', %s)").format(
                ident
            ),
            (first.stem.partition("_")[2],),
        )


def _env(dsn: str, schema: str, **extra: str) -> dict[str, str]:
    drop = ("DATABASE_URL", "PGSCHED_HTTP_TOKEN", "PGSCHED_LOG_FORMAT")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PGSCHED_DSN=dsn, PGSCHED_SCHEMA=schema, **extra)
    return env


@pytest.fixture(scope="module")
def cluster(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    workdir = tmp_path_factory.mktemp("http")
    (workdir / "app.py").write_text(APP)
    (workdir / "quiet_app.py").write_text(QUIET_APP)
    tag = uuid.uuid4().hex[:10]
    schema, unmigrated, old_schema = f"t_http_{tag}", f"t_http_{tag}_nomig", f"t_http_{tag}_v1"
    conn = psycopg.connect(pg_dsn, autocommit=True)
    replicas: list[Replica] = []
    try:
        _migrate(pg_dsn, schema)
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
        main = Replica(
            "main",
            ["run", "app.py", "--runner-id", "http-main", "--http-port", "0"],
            workdir,
            _env(pg_dsn, schema, PGSCHED_HTTP_TOKEN=TOKEN),
        )
        quiet = Replica(
            "quiet",
            ["run", "quiet_app.py", "--runner-id", "http-quiet", "--http-port", "0"],
            workdir,
            _env(pg_dsn, schema),  # no PGSCHED_HTTP_TOKEN at all
        )
        nomig = Replica(
            "nomig",
            ["run", "quiet_app.py", "--runner-id", "http-nomig", "--http-port", "0"],
            workdir,
            _env(pg_dsn, unmigrated, PGSCHED_HTTP_TOKEN=""),  # set, but empty
        )
        old = Replica(
            "old",
            ["run", "quiet_app.py", "--runner-id", "http-old", "--http-port", "0"],
            workdir,
            _env(pg_dsn, old_schema),
        )
        replicas += [main, quiet, nomig, old]
        for replica in replicas:
            replica.wait_listening()
        cluster = Cluster(pg_dsn, schema, unmigrated, conn, main, quiet, nomig, old)
        cluster.replicas = replicas
        # The main replica has ticked and recorded its jobs.
        wait_until(
            lambda: (
                main.alive()
                and cluster.one(
                    "SELECT count(*) FROM {s}.job_state WHERE job_name = ANY(%s)",
                    (list(MAIN_JOBS),),
                )
                == len(MAIN_JOBS)
            ),
            20,
            "the main replica's jobs in job_state",
        )
        yield cluster
        # Checked when the module's tests are done, not by a test meant to run last: neither a
        # shuffled order nor a worker that steals the tail of the module keeps a test last.
        _everything_left_the_replicas_answering_and_they_exit_cleanly(cluster)
    finally:
        for replica in replicas:
            replica.stop()
        for name in (schema, unmigrated, old_schema):
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
        conn.close()


def _everything_left_the_replicas_answering_and_they_exit_cleanly(cluster: Cluster) -> None:
    for replica in cluster.replicas:
        assert replica.alive(), replica.name
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


def _seed_job(c: Cluster, job: str) -> None:
    c.q("INSERT INTO {s}.job_state (job_name) VALUES (%s) ON CONFLICT DO NOTHING", (job,))


def _seed_run(
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


def _stable(read: Any, timeout: float = 15, what: str = "") -> Any:
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

    wait_until(settled, timeout, what or "a stable reading", interval=0.05)
    return last[-1]


# -- 1. names and labels -------------------------------------------------------------------


def test_metrics_expose_spec_names_types_and_labels(cluster: Cluster) -> None:
    # Wait until every labelled family has at least one series (the skip counter included:
    # the seeded old plan of `tick` makes the first claim supersede ~100 plans).
    m = wait_until(
        lambda: (
            (s := scrape(cluster.main)).value(
                "pgsched_plans_skipped_total", job="tick", reason="superseded"
            )
            and s.value("pgsched_runs_total", job="boom", status="failed")
            and s.value("pgsched_last_success_timestamp_seconds", job="tick")
            and s
        ),
        15,
        "series in every family",
    )
    for name, (kind, labels, sample) in EXPECTED_METRICS.items():
        family = m.families.get(name)
        assert family is not None, f"{name} missing from /metrics"
        assert family.type == kind, (name, family.type)
        samples = [s for s in family.samples if not s.name.endswith("_created")]
        assert samples, f"{name} has no series"
        assert any(s.name == sample for s in samples), (name, {s.name for s in samples})
        for s in samples:
            names = set(s.labels) - ({"le"} if s.name.endswith("_bucket") else set())
            assert names == labels, (s.name, s.labels)
    # The exact sample names of the README's metric table in the text itself.
    for sample in (
        "pgsched_runs_total{",
        "pgsched_run_duration_seconds_bucket{",
        "pgsched_claims_total{",
        "pgsched_running_stale{",
        "pgsched_failed_runs{",
        "pgsched_last_success_timestamp_seconds{",
        "pgsched_plans_skipped_total{",
        "pgsched_leases_lost_total{",
        "pgsched_tick_duration_seconds_bucket{le=",
        "pgsched_tick_duration_seconds_count ",
    ):
        assert sample in m.text, sample

    label_values = {
        (n, v)
        for f in m.families.values()
        if f.name.startswith("pgsched_")
        for s in f.samples
        for n, v in s.labels.items()
    }
    assert {v for n, v in label_values if n == "status"} <= {"success", "failed"}
    assert {v for n, v in label_values if n == "outcome"} == {"won", "stole", "retry", "conflict"}
    assert {v for n, v in label_values if n == "reason"} <= {"superseded", "max_lateness"}
    assert not [n for n, _ in label_values if "scope" in n.lower()]
    assert SCOPE_ID not in m.text  # the running job's scope id is in no label
    for job in MAIN_JOBS:
        assert ("job", job) in label_values, job


# -- 2. values -----------------------------------------------------------------------------


# The database gauges are read on scrape and cached for CACHE_TTL_S: a change in the database
# shows within that, and never runs ahead of it. The deadline allows 8 s more: a guard against
# an order-of-magnitude regression, not a performance claim (those live in bench/).
GAUGE_DEADLINE_S = CACHE_TTL_S + 8


def _gauge_becomes(cluster: Cluster, sample: str, job: str, expected: float) -> None:
    wait_until(
        lambda: scrape(cluster.main).value(sample, job=job) == expected,
        GAUGE_DEADLINE_S,
        f"{sample}{{job={job}}} to become {expected}",
        interval=0.25,
    )


def test_running_stale_gauge_follows_the_database(cluster: Cluster) -> None:
    job = "ghost_stale"  # known in job_state, run by no replica: nobody closes its rows
    _seed_job(cluster, job)
    _gauge_becomes(cluster, "pgsched_running_stale", job, 0)

    first = _seed_run(cluster, job, "RUNNING", stale_in_s=-60)
    _seed_run(cluster, job, "RUNNING", ago_s=10, stale_in_s=600)  # live lease: not stale
    _gauge_becomes(cluster, "pgsched_running_stale", job, 1)

    _seed_run(cluster, job, "RUNNING", ago_s=200, stale_in_s=-1)
    _gauge_becomes(cluster, "pgsched_running_stale", job, 2)

    cluster.q(
        "UPDATE {s}.cron_executions SET status = 'FAILED', finished_at = clock_timestamp()"
        " WHERE id = %s",
        (first,),
    )
    _gauge_becomes(cluster, "pgsched_running_stale", job, 1)
    m = scrape(cluster.main)
    assert m.value("pgsched_failed_runs", job=job) == 1
    assert m.value("pgsched_running_stale", job="tick") == 0


def test_failed_runs_gauge_counts_only_failures_without_retry(cluster: Cluster) -> None:
    job = "ghost_failed"
    _seed_job(cluster, job)
    _seed_run(cluster, job, "FAILED", finished_ago_s=250)  # no retry left: counted
    _seed_run(cluster, job, "FAILED", ago_s=400, finished_ago_s=390, retry_in_s=3600)
    _seed_run(cluster, job, "SUCCESS", ago_s=500, finished_ago_s=480)
    _gauge_becomes(cluster, "pgsched_failed_runs", job, 1)
    finished = cluster.one(
        "SELECT max(finished_at) FROM {s}.cron_executions WHERE job_name = %s"
        " AND status = 'SUCCESS'",
        (job,),
    )
    assert scrape(cluster.main).value(
        "pgsched_last_success_timestamp_seconds", job=job
    ) == pytest.approx(finished.timestamp(), abs=1e-3)

    # boom fails every second with max_attempts=1: the gauge catches up with a count taken
    # before, never exceeds a count taken after, and it moves.
    count = "SELECT count(*) FROM {s}.cron_executions WHERE job_name = 'boom'" + (
        " AND status = 'FAILED' AND next_retry_at IS NULL"
    )
    before = cluster.one(count)
    wait_until(
        lambda: scrape(cluster.main).v("pgsched_failed_runs", job="boom") >= before,
        GAUGE_DEADLINE_S,
        "pgsched_failed_runs{job=boom} to catch up with the database",
    )
    gauge = scrape(cluster.main).value("pgsched_failed_runs", job="boom")
    assert gauge is not None and gauge <= cluster.one(count)
    wait_until(
        lambda: scrape(cluster.main).v("pgsched_failed_runs", job="boom") > gauge,
        GAUGE_DEADLINE_S,
        "pgsched_failed_runs{job=boom} to grow",
    )


def test_runs_total_and_duration_match_the_rows_this_replica_finished(cluster: Cluster) -> None:
    r = cluster.runner

    def read() -> tuple[bool, tuple[Any, ...]]:
        m1 = scrape(cluster.main)
        rows = dict(
            ((job, status), n)
            for job, status, n in cluster.q(
                "SELECT job_name, status, count(*) FROM {s}.cron_executions"
                " WHERE runner_id = %s AND job_name IN ('tick', 'boom') GROUP BY 1, 2",
                (r,),
            )
        )
        m2 = scrape(cluster.main)
        counters = tuple(
            (
                m.v("pgsched_runs_total", job=job, status="success"),
                m.v("pgsched_runs_total", job=job, status="failed"),
                m.v("pgsched_run_duration_seconds_count", job=job),
            )
            for m in (m1, m2)
            for job in ("tick", "boom")
        )
        db = (
            (rows.get(("tick", "SUCCESS"), 0), rows.get(("tick", "FAILED"), 0)),
            (rows.get(("boom", "SUCCESS"), 0), rows.get(("boom", "FAILED"), 0)),
        )
        m_counts = tuple((c[0], c[1]) for c in counters[:2])
        settled = counters[:2] == counters[2:] and m_counts == db
        return settled, counters[:2]

    ok, ((tick_ok, tick_failed, tick_n), (boom_ok, boom_failed, boom_n)) = _stable(
        read, what="runs_total == the database's finished rows of this replica"
    )
    assert ok
    assert tick_ok >= 1 and tick_failed == 0 and tick_n == tick_ok
    assert boom_failed >= 1 and boom_ok == 0 and boom_n == boom_failed
    # The failures counted are handler errors with the exception in error_msg.
    codes = cluster.q(
        "SELECT DISTINCT error_code, error_msg FROM {s}.cron_executions"
        " WHERE job_name = 'boom' AND status = 'FAILED'"
    )
    assert codes == [("handler_error", f"RuntimeError: {HOSTILE_ERROR}")]
    # Both move on: boom keeps failing.
    wait_until(
        lambda: (
            scrape(cluster.main).v("pgsched_runs_total", job="boom", status="failed") > boom_failed
        ),
        10,
        "pgsched_runs_total{job=boom,status=failed} to grow",
    )


def test_last_success_timestamp_is_the_latest_success_in_the_database(cluster: Cluster) -> None:
    latest = "SELECT extract(epoch FROM max(finished_at))::float8 FROM {s}.cron_executions"
    latest += " WHERE job_name = 'tick' AND status = 'SUCCESS'"
    wait_until(lambda: cluster.one(latest), 10, "a SUCCESS of tick")
    before, read_at = cluster.q(
        "SELECT extract(epoch FROM max(finished_at))::float8,"
        " extract(epoch FROM clock_timestamp())::float8 FROM {s}.cron_executions"
        " WHERE job_name = 'tick' AND status = 'SUCCESS'"
    )[0]
    # tick succeeds every second: its latest success is recent when read (normally under
    # 1.5 s old). The 5 s guards against an order-of-magnitude regression, not a performance
    # claim: see bench/. Measured at one read, it does not depend on how long the waits below
    # take on a loaded machine.
    assert read_at - 5 < before <= read_at
    wait_until(
        lambda: (
            scrape(cluster.main).v("pgsched_last_success_timestamp_seconds", job="tick")
            >= before - 1e-3
        ),
        GAUGE_DEADLINE_S,
        "the gauge to catch up with the database",
    )
    gauge = scrape(cluster.main).value("pgsched_last_success_timestamp_seconds", job="tick")
    after = cluster.one(latest)
    assert gauge is not None
    assert before - 1e-3 <= gauge <= after + 1e-3, (before, gauge, after)
    # No series for a job that never succeeded.
    assert scrape(cluster.main).value("pgsched_last_success_timestamp_seconds", job="boom") is None


def test_claims_and_skips_match_the_rows_this_replica_claimed(cluster: Cluster) -> None:
    r = cluster.runner
    # Two claims of `tick` at least, whenever this test runs (first, in a shuffled order).
    wait_until(
        lambda: (
            cluster.one(
                "SELECT count(*) FROM {s}.cron_executions"
                " WHERE job_name = 'tick' AND runner_id = %s",
                (r,),
            )
            >= 2
        ),
        15,
        "the main replica's second claim of tick",
    )

    def read() -> tuple[bool, Any]:
        m1 = scrape(cluster.main)
        claimed = dict(
            cluster.q(
                "SELECT job_name, count(*) FROM {s}.cron_executions WHERE runner_id = %s"
                " GROUP BY 1",
                (r,),
            )
        )
        # latest_only: every schedule plan between a replica's claim and the scope's previous
        # stored plan was superseded. Only `tick` and `boom` (every 1s) can skip here.
        spans = dict(
            (job, int(span) - n)
            for job, span, n in cluster.q(
                "SELECT job_name, extract(epoch FROM max(plan_time) - min(plan_time)),"
                " count(*) - 1 FROM {s}.cron_executions"
                " WHERE job_name IN ('tick', 'boom') AND trigger = 'schedule' GROUP BY 1"
            )
        )
        m2 = scrape(cluster.main)
        metrics = [
            {
                job: (
                    m.v("pgsched_claims_total", job=job, outcome="won"),
                    m.v("pgsched_claims_total", job=job, outcome="stole"),
                    m.v("pgsched_claims_total", job=job, outcome="retry"),
                    m.v("pgsched_claims_total", job=job, outcome="conflict"),
                    m.v("pgsched_plans_skipped_total", job=job, reason="superseded"),
                )
                for job in MAIN_JOBS
            }
            for m in (m1, m2)
        ]
        expected = {job: (claimed.get(job, 0), 0, 0, 0, spans.get(job, 0)) for job in MAIN_JOBS}
        return metrics[0] == metrics[1] == expected, (metrics[0], expected)

    ok, (metrics, expected) = _stable(read, what="claims_total == this replica's rows")
    assert ok, (metrics, expected)
    assert metrics["tick"][0] >= 2  # it has been claiming every second
    # The seeded plan 100 s before start was superseded by everything up to the first claim.
    assert metrics["tick"][4] >= SEEDED_GAP_S - 10


def test_tick_duration_histogram_grows_with_every_tick(cluster: Cluster) -> None:
    # A first tick observed, whenever this test runs (first, in a shuffled order).
    wait_until(
        lambda: (scrape(cluster.main).value("pgsched_tick_duration_seconds_count") or 0) >= 1,
        10,
        "a first tick in the histogram",
    )
    first = scrape(cluster.main)
    count = first.value("pgsched_tick_duration_seconds_count")
    assert count is not None and count >= 1
    assert first.v("pgsched_tick_duration_seconds_sum") > 0
    inf = first.value("pgsched_tick_duration_seconds_bucket", le="+Inf")
    assert inf == count
    wait_until(
        lambda: scrape(cluster.main).v("pgsched_tick_duration_seconds_count") >= count + 2,
        10,
        "two more ticks (tick_interval is 0.5 s)",
    )


def test_leases_lost_counts_one_lost_lease_once(cluster: Cluster) -> None:
    m = scrape(cluster.main)
    assert m.value("pgsched_leases_lost_total", job="lossy") == 0  # declared at start
    resp = cluster.main.post("/api/jobs/lossy/trigger", token=TOKEN)
    assert resp.status == 201, resp.text
    ident = resp.json()["id"]
    wait_until(
        lambda: cluster.q(
            "SELECT 1 FROM {s}.cron_executions WHERE id = %s AND status = 'RUNNING'", (ident,)
        ),
        10,
        "the triggered lossy run to start",
    )
    # Another holder takes the row over: the replica's next heartbeat matches nothing.
    cluster.q(
        "UPDATE {s}.cron_executions SET lease_token = gen_random_uuid() WHERE id = %s", (ident,)
    )
    notes = wait_until(
        lambda: cluster.q("SELECT note FROM {s}.ledger WHERE execution_id = %s", (ident,)),
        15,
        "the lossy handler to notice and return",
    )
    assert notes == [("lost",)]
    assert scrape(cluster.main).value("pgsched_leases_lost_total", job="lossy") == 1
    # The old holder wrote nothing.
    assert cluster.q(
        "SELECT status, finished_at FROM {s}.cron_executions WHERE id = %s", (ident,)
    ) == [("RUNNING", None)]


# -- 3. probes -----------------------------------------------------------------------------


def test_healthz_and_readyz_on_a_migrated_replica(cluster: Cluster) -> None:
    health = cluster.main.get("/healthz")
    assert health.status == 200, health.text
    assert health.json()["alive"] is True
    ready = cluster.main.get("/readyz")
    assert ready.status == 200, ready.text
    assert ready.json()["ready"] is True


def test_unmigrated_schema_is_alive_but_not_ready(cluster: Cluster) -> None:
    nomig = cluster.nomig
    ready = nomig.get("/readyz")
    assert ready.status == 503, ready.text
    assert ready.json()["ready"] is False
    # The loop is alive although every tick fails.
    wait_until(
        lambda: nomig.alive() and nomig.events("tick_error"),
        10,
        "a failed tick on the unmigrated schema",
    )
    health = nomig.get("/healthz")
    assert health.status == 200, health.text
    assert health.json()["alive"] is True
    assert cluster.conn.execute(
        "SELECT to_regclass(%s)", (f'"{cluster.unmigrated}".cron_executions',)
    ).fetchone() == (None,)
    # Migrating makes it ready, without a restart.
    _migrate(cluster.dsn, cluster.unmigrated)
    wait_until(lambda: nomig.get("/readyz").status == 200, 10, "/readyz to turn 200")


def test_schema_missing_a_migration_is_not_ready(cluster: Cluster) -> None:
    """Only 0001 applied (pgsched upgraded, ``migrate`` not run yet): the replica cannot work
    (its ticks fail on the missing columns), so it is not "migrated" in the sense of ``/readyz``."""
    old = cluster.old
    wait_until(
        lambda: old.alive() and old.events("tick_error"),
        10,
        "a failed tick on the half-migrated schema",
    )
    assert old.get("/healthz").status == 200
    ready = old.get("/readyz")
    assert ready.status == 503, (ready.status, ready.text)
    assert ready.json()["ready"] is False


# -- 4. the status page --------------------------------------------------------------------


def test_status_page_lists_every_job_and_escapes_hostile_data(cluster: Cluster) -> None:
    _seed_job(cluster, "ghost_page")
    _seed_job(cluster, HOSTILE_JOB)
    _seed_run(cluster, "ghost_page", "RUNNING", scope_id=HOSTILE_SCOPE, stale_in_s=-30)
    _seed_run(cluster, HOSTILE_JOB, "FAILED", scope_id=HOSTILE_SCOPE, ago_s=20, finished_ago_s=5)
    wait_until(
        lambda: cluster.one(
            "SELECT count(*) FROM {s}.cron_executions WHERE job_name = 'boom' AND status = 'FAILED'"
        ),
        10,
        "a failure of boom",
    )
    resp = cluster.main.get("/")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/html"), resp.headers["Content-Type"]
    page = resp.text
    jobs = [*MAIN_JOBS, "quiet", "ghost_page"]
    for job in jobs:
        assert f">{job}<" in page, job
    assert html.escape(HOSTILE_JOB) in page
    assert html.escape(HOSTILE_SCOPE) in page
    assert html.escape(HOSTILE_ERROR) in page  # boom's error_msg under recent failures
    assert "<script" not in page.lower()
    assert HOSTILE_ERROR not in page and HOSTILE_JOB not in page and "<b>job" not in page


# -- 5. the JSON API -----------------------------------------------------------------------

JOB_FIELDS = {
    "job",
    "paused",
    "schedule",
    "last_plan",
    "last_status",
    "last_success",
    "running",
    "stale",
    "failed",
    "pending",
}
RUN_FIELDS = {
    "id",
    "job",
    "scope",
    "plan_time",
    "trigger",
    "status",
    "attempt",
    "max_attempts",
    "next_retry_at",
    "runner_id",
    "fencing_token",
    "heartbeat_at",
    "stale_after",
    "started_at",
    "finished_at",
    "duration_ms",
    "rows_affected",
    "result",
    "error_code",
    "error_msg",
    "created_at",
    "stale",
}


def test_api_jobs(cluster: Cluster) -> None:
    _seed_job(cluster, "ghost_api")
    _seed_run(cluster, "ghost_api", "RUNNING", stale_in_s=-5)
    resp = cluster.main.get("/api/jobs")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    jobs = {j["job"]: j for j in resp.json()["jobs"]}
    assert {*MAIN_JOBS, "quiet", "ghost_api"} <= set(jobs)
    for job in jobs.values():
        assert set(job) >= JOB_FIELDS, set(job) ^ JOB_FIELDS
    tick = jobs["tick"]
    assert tick["paused"] is False
    assert tick["schedule"]
    assert tick["last_status"] in ("RUNNING", "SUCCESS")
    assert datetime.fromisoformat(tick["last_success"]).tzinfo is not None
    assert tick["stale"] == 0 and tick["failed"] == 0
    assert jobs["boom"]["failed"] >= 1 and jobs["boom"]["last_success"] is None
    assert (jobs["ghost_api"]["stale"], jobs["ghost_api"]["running"]) == (1, 0)


def test_api_runs_fields_filters_and_limit(cluster: Cluster) -> None:
    # The rows the filters below pick from, whenever this test runs (first, in a shuffled
    # order): three of tick, five successes, a failure of boom.
    wait_until(
        lambda: cluster.one(
            "SELECT count(*) FILTER (WHERE job_name = 'tick') >= 3"
            " AND count(*) FILTER (WHERE status = 'SUCCESS') >= 5"
            " AND count(*) FILTER (WHERE job_name = 'boom' AND status = 'FAILED') >= 1"
            " FROM {s}.cron_executions"
        ),
        20,
        "three runs of tick, five successes and a failure of boom",
    )
    resp = cluster.main.get("/api/runs")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    runs = resp.json()["runs"]
    assert 1 <= len(runs) <= 50
    for run in runs:
        assert set(run) >= RUN_FIELDS, set(run) ^ RUN_FIELDS
        uuid.UUID(run["id"])
    created = [datetime.fromisoformat(r["created_at"]) for r in runs]
    assert created == sorted(created, reverse=True)  # newest first

    tick = cluster.main.get("/api/runs?job=tick&limit=3").json()["runs"]
    assert len(tick) == 3 and {r["job"] for r in tick} == {"tick"}
    row = cluster.q(
        "SELECT job_name, scope_kind, scope_id, plan_time, trigger FROM {s}.cron_executions"
        " WHERE id = %s",
        (tick[0]["id"],),
    )[0]
    assert row[:3] == ("tick", "tenant", SCOPE_ID) and row[4] == "schedule"
    assert datetime.fromisoformat(tick[0]["plan_time"]) == row[3]

    failed = cluster.main.get("/api/runs?job=boom&status=FAILED&limit=1000").json()["runs"]
    in_db = cluster.one(
        "SELECT count(*) FROM {s}.cron_executions WHERE job_name = 'boom' AND status = 'FAILED'"
    )
    assert 1 <= len(failed) <= in_db
    assert {(r["job"], r["status"], r["error_code"]) for r in failed} == {
        ("boom", "FAILED", "handler_error")
    }
    lower = cluster.main.get("/api/runs?status=success&limit=5").json()["runs"]
    assert len(lower) == 5 and {r["status"] for r in lower} == {"SUCCESS"}
    assert len(cluster.main.get("/api/runs?limit=1").json()["runs"]) == 1
    assert cluster.main.get("/api/runs?job=no-such-job").json() == {"runs": []}

    for bad in ("0", "-1", "1001", "abc", "", "2.5"):
        resp = cluster.main.get(f"/api/runs?limit={bad}")
        assert resp.status == 400, (bad, resp.status, resp.text)
        assert "limit" in resp.json()["error"]
    resp = cluster.main.get("/api/runs?status=bogus")
    assert resp.status == 400 and "status" in resp.json()["error"]


# -- 6. the write API and its token ---------------------------------------------------------

WRITES = (
    "/api/jobs/hourly/trigger",
    "/api/jobs/pausable/pause",
    "/api/jobs/pausable/resume",
    f"/api/runs/{uuid.uuid4()}/cancel",
)


def _pending(cluster: Cluster) -> int:
    return int(cluster.one("SELECT count(*) FROM {s}.cron_executions WHERE status = 'PENDING'"))


def test_writes_are_refused_when_no_token_is_configured(cluster: Cluster) -> None:
    pending = _pending(cluster)
    cluster.q("UPDATE {s}.job_state SET paused = false WHERE job_name = 'pausable'")
    for replica in (cluster.quiet, cluster.nomig):  # unset, and set to ""
        for path in WRITES:
            for token in (None, TOKEN, ""):
                resp = replica.post(path, token=token, body={})
                assert resp.status == 403, (replica.name, path, token, resp.status, resp.text)
                assert "PGSCHED_HTTP_TOKEN" in resp.json()["error"]
    assert _pending(cluster) == pending
    assert cluster.q("SELECT paused FROM {s}.job_state WHERE job_name = 'pausable'") == [(False,)]
    # Reading stays open.
    assert cluster.quiet.get("/api/jobs").status == 200


def test_writes_need_the_right_bearer_token(cluster: Cluster) -> None:
    pending = _pending(cluster)
    cluster.q("UPDATE {s}.job_state SET paused = false WHERE job_name = 'pausable'")
    for path in WRITES:
        attempts: list[dict[str, str]] = [
            {},
            {"Authorization": f"Bearer {TOKEN}x"},
            {"Authorization": f"Bearer {TOKEN[:-1]}"},
            {"Authorization": "Bearer "},
            {"Authorization": TOKEN},
            {"Authorization": f"Basic {TOKEN}"},
        ]
        for headers in attempts:
            resp = cluster.main.post(path, headers=headers, body={})
            assert resp.status == 401, (path, headers, resp.status, resp.text)
            assert resp.headers.get("WWW-Authenticate", "").startswith("Bearer")
    assert _pending(cluster) == pending
    assert cluster.q("SELECT paused FROM {s}.job_state WHERE job_name = 'pausable'") == [(False,)]


def test_trigger_runs_the_job_on_a_replica_that_has_it(cluster: Cluster) -> None:
    resp = cluster.main.post("/api/jobs/hourly/trigger", token=TOKEN)  # no body at all
    assert resp.status == 201, resp.text
    ident = resp.json()["id"]
    row = wait_until(
        lambda: cluster.q(
            "SELECT trigger, status, runner_id, scope_kind, scope_id FROM {s}.cron_executions"
            " WHERE id = %s AND status = 'SUCCESS'",
            (ident,),
        ),
        10,
        "the triggered run to succeed",
    )
    assert row == [("manual", "SUCCESS", cluster.runner, "global", "global")]

    resp = cluster.main.post("/api/jobs/hourly/trigger", token=TOKEN, body={"scope": "tenant:4:2"})
    assert resp.status == 201, resp.text
    scoped = resp.json()["id"]
    assert scoped != ident
    assert cluster.q(
        "SELECT scope_kind, scope_id, trigger FROM {s}.cron_executions WHERE id = %s", (scoped,)
    ) == [("tenant", "4:2", "manual")]

    # A job this replica does not run, but another one does (it is in job_state).
    resp = cluster.main.post("/api/jobs/quiet/trigger", token=TOKEN, body={})
    assert resp.status == 201, resp.text
    quiet = wait_until(
        lambda: cluster.q(
            "SELECT runner_id FROM {s}.cron_executions WHERE id = %s AND status = 'SUCCESS'",
            (resp.json()["id"],),
        ),
        10,
        "the quiet replica to run its triggered job",
    )
    assert quiet == [("http-quiet",)]


def test_delayed_trigger_is_deduplicated_and_cancellable(cluster: Cluster) -> None:
    at = cluster.one("SELECT date_trunc('second', clock_timestamp()) + interval '1 hour'")
    resp = cluster.main.post("/api/jobs/hourly/trigger", token=TOKEN, body={"at": at.isoformat()})
    assert resp.status == 201, resp.text
    body = resp.json()
    ident = body["id"]
    assert body["created"] is True
    assert cluster.q(
        "SELECT status, trigger, plan_time FROM {s}.cron_executions WHERE id = %s", (ident,)
    ) == [("PENDING", "manual", at)]

    # While it is PENDING, a second trigger of the same job and scope returns it.
    for again in ({"at": at.isoformat()}, {"at": (at + timedelta(minutes=5)).isoformat()}, None):
        resp = cluster.main.post("/api/jobs/hourly/trigger", token=TOKEN, body=again)
        assert resp.status == 200, (again, resp.text)
        assert resp.json() == {"id": ident, "created": False}
    assert (
        cluster.one(
            "SELECT count(*) FROM {s}.cron_executions WHERE job_name = 'hourly'"
            " AND status = 'PENDING'"
        )
        == 1
    )

    resp = cluster.main.post(f"/api/runs/{ident}/cancel", token=TOKEN)
    assert resp.status == 200, resp.text
    assert resp.json()["status"] == "CANCELLED"
    assert cluster.q("SELECT status FROM {s}.cron_executions WHERE id = %s", (ident,)) == [
        ("CANCELLED",)
    ]
    # Not PENDING any more: a conflict. Neither are RUNNING/SUCCESS/FAILED rows.
    resp = cluster.main.post(f"/api/runs/{ident}/cancel", token=TOKEN)
    assert resp.status == 409, resp.text
    done = cluster.one(
        "SELECT id FROM {s}.cron_executions WHERE job_name = 'tick' AND status = 'SUCCESS' LIMIT 1"
    )
    resp = cluster.main.post(f"/api/runs/{done}/cancel", token=TOKEN)
    assert resp.status == 409, resp.text
    assert cluster.q("SELECT status FROM {s}.cron_executions WHERE id = %s", (done,)) == [
        ("SUCCESS",)
    ]


def test_pause_and_resume_flip_job_state(cluster: Cluster) -> None:
    def paused() -> bool:
        return bool(cluster.one("SELECT paused FROM {s}.job_state WHERE job_name = 'pausable'"))

    assert paused() is False
    resp = cluster.main.post("/api/jobs/pausable/pause", token=TOKEN)
    assert resp.status == 200, resp.text
    assert resp.json() == {"job": "pausable", "paused": True}
    assert paused() is True
    jobs = {j["job"]: j for j in cluster.main.get("/api/jobs").json()["jobs"]}
    assert jobs["pausable"]["paused"] is True and jobs["hourly"]["paused"] is False
    resp = cluster.main.post("/api/jobs/pausable/pause", token=TOKEN)  # idempotent
    assert resp.status == 200 and paused() is True

    resp = cluster.main.post("/api/jobs/pausable/resume", token=TOKEN)
    assert resp.status == 200, resp.text
    assert resp.json() == {"job": "pausable", "paused": False}
    assert paused() is False


def test_write_api_errors(cluster: Cluster) -> None:
    def manual() -> int:
        return int(cluster.one("SELECT count(*) FROM {s}.cron_executions WHERE trigger = 'manual'"))

    before = manual()
    cases: list[tuple[str, Any, int]] = [
        ("/api/jobs/no-such-job/trigger", {}, 404),
        ("/api/jobs/no-such-job/pause", None, 404),
        ("/api/jobs/no-such-job/resume", None, 404),
        (f"/api/runs/{uuid.uuid4()}/cancel", None, 404),
        ("/api/runs/not-a-uuid/cancel", None, 400),
        ("/api/jobs/hourly/trigger", {"scope": "no-colon"}, 400),
        ("/api/jobs/hourly/trigger", {"scope": ":id"}, 400),
        ("/api/jobs/hourly/trigger", {"scope": "kind:"}, 400),
        ("/api/jobs/hourly/trigger", {"at": "tomorrow at nine"}, 400),
        ("/api/jobs/hourly/trigger", b"{not json", 400),
        ("/api/jobs/hourly/trigger", [1, 2], 400),
    ]
    for path, body, status in cases:
        resp = cluster.main.post(path, token=TOKEN, body=body)
        assert resp.status == status, (path, body, resp.status, resp.text)
        assert resp.json()["error"], (path, body)
    assert manual() == before  # no bad request inserted anything
    assert not cluster.q("SELECT 1 FROM {s}.cron_executions WHERE job_name = 'no-such-job'")
    assert not cluster.q("SELECT 1 FROM {s}.job_state WHERE job_name = 'no-such-job'")


# -- 7. the bind address -------------------------------------------------------------------


def _non_loopback_ipv4() -> list[str]:
    found: set[str] = set()
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.add(str(info[4][0]))
    except OSError:
        pass
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.123", 9))  # no packet is sent for a UDP connect
            found.add(s.getsockname()[0])
        except OSError:
            pass
    return sorted(a for a in found if not a.startswith("127.") and a != "0.0.0.0")


def _listening(port: int) -> list[str]:
    """Local addresses (hex, as in /proc/net/tcp*) listening on ``port``."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            address, _, hexport = local.partition(":")
            if state == "0A" and int(hexport, 16) == port:
                found.append(address)
    return found


def test_server_binds_loopback_by_default(cluster: Cluster) -> None:
    port = cluster.main.port
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    if Path("/proc/net/tcp").exists():
        assert _listening(port) == ["0100007F"]  # 127.0.0.1 only, no IPv6 wildcard either
    addresses = _non_loopback_ipv4()
    if not addresses:
        pytest.skip("this machine has no non-loopback IPv4 address")
    for address in addresses:
        with pytest.raises(OSError), socket.create_connection((address, port), timeout=3):
            pass
