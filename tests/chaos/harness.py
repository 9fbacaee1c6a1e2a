"""The chaos harness: a private PostgreSQL, real ``pgsched run`` replicas, fault-injecting TCP
proxies, a side-effect ledger, and the checks O1-O6 reported in docs/reliability.md
(``checks.py``).

Everything is measured on the database's clock. The harness installs, in the scenario's
schema next to pgsched's tables, an audit trigger on ``cron_executions`` that records every
committed claim, steal and terminal write (``chaos_history``); the handlers of
``replica_app.py`` write the ledger (``chaos_ledger``) and the notices they get about lost
leases (``chaos_notices``). pgsched itself is not touched.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import signal
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

import pgsched
from tests.chaos.checks import evaluate
from tests.chaos.timing import APP, JOBS, Timing, faketime_library
from tests.support.postgres import PrivateServer
from tests.support.proxy import TcpProxy
from tests.support.replica import Replica
from tests.support.waiting import wait_until


@dataclass
class Abandonment:
    """Leases left behind by a replica at ``at`` (database clock): killed, stopped, cut off."""

    at: datetime
    runner_id: str
    kind: str
    leases: list[tuple[uuid.UUID, uuid.UUID]]  # (execution id, lease token)


_AUDIT_TABLES = """
CREATE TABLE {s}.chaos_history (
    seq bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp(),
    id uuid, job text, scope_id text, plan_time timestamptz, trigger text,
    old_status text, new_status text, old_token uuid, new_token uuid,
    old_fencing bigint, new_fencing bigint, attempt int, runner_id text,
    started_at timestamptz, finished_at timestamptz, error_code text);
CREATE TABLE {s}.chaos_ledger (
    seq bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp(),
    kind text, job text, scope_id text, plan_time timestamptz, attempt int,
    execution_id uuid, lease_token uuid, fencing_token bigint, runner_id text,
    pid int, replica_wall timestamptz);
CREATE TABLE {s}.chaos_notices (
    seq bigserial PRIMARY KEY, at timestamptz NOT NULL DEFAULT clock_timestamp(),
    what text, runner_id text, pid int, execution_id uuid, lease_token uuid,
    fencing_token bigint);
"""

# {schema} is the schema as an SQL identifier (inside the function body, which the
# formatter does not see); {{s}} becomes {s} for ChaosRun.q.
_AUDIT_TRIGGER = """
CREATE FUNCTION {{s}}.chaos_record() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
    INSERT INTO {schema}.chaos_history
        (id, job, scope_id, plan_time, trigger, old_status, new_status, old_token,
         new_token, old_fencing, new_fencing, attempt, runner_id, started_at,
         finished_at, error_code)
    VALUES (NEW.id, NEW.job_name, NEW.scope_id, NEW.plan_time, NEW.trigger,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.status END, NEW.status,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.lease_token END, NEW.lease_token,
            CASE WHEN TG_OP = 'UPDATE' THEN OLD.fencing_token END,
            NEW.fencing_token, NEW.attempt, NEW.runner_id, NEW.started_at,
            NEW.finished_at, NEW.error_code);
    RETURN NULL;
END $f$;
CREATE TRIGGER chaos_insert AFTER INSERT ON {{s}}.cron_executions
    FOR EACH ROW EXECUTE FUNCTION {{s}}.chaos_record();
CREATE TRIGGER chaos_update AFTER UPDATE ON {{s}}.cron_executions
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
                       OR OLD.lease_token IS DISTINCT FROM NEW.lease_token)
    EXECUTE FUNCTION {{s}}.chaos_record();
"""


class Monitor:
    """Samples, every second on a connection of its own, how many rows are RUNNING and which
    are older than run_timeout + stale_timeout (O6)."""

    def __init__(self, dsn: str, schema: str, age_s: float) -> None:
        self.dsn, self.age_s = dsn, age_s
        self.query = sql.SQL(
            "SELECT clock_timestamp() AS t, count(*) AS running,"
            " coalesce(array_agg(id::text || ' ' || extract(epoch FROM clock_timestamp()"
            " - started_at)::text || ' ' || runner_id) FILTER (WHERE started_at < clock_timestamp()"
            " - make_interval(secs => %s)), '{{}}') AS old"
            " FROM {}.cron_executions WHERE status = 'RUNNING'"
        ).format(sql.Identifier(schema))
        # (database time, [(id, age in s, runner) of RUNNING rows older than the bound])
        self.o6_samples: list[tuple[datetime, list[tuple[str, float, str]]]] = []
        self.running_samples: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="chaos-monitor", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        while not self._stop.wait(1.0):
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        self.dsn, autocommit=True, row_factory=dict_row, connect_timeout=3
                    )
                row = conn.execute(self.query, (self.age_s,)).fetchone()
                assert row is not None
                self.running_samples.append(int(row["running"]))
                old = [(i, float(a), r) for i, a, r in (x.split() for x in row["old"])]
                self.o6_samples.append((row["t"], old))
            except psycopg.Error:  # the server restarts: sampled again once it is back
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


class ChaosRun:
    """One scenario: its own schema on the server, its replicas, its faults and its figures.

    Use as a context manager: every process it started is killed on the way out, whatever
    happened.
    """

    def __init__(
        self,
        server: PrivateServer,
        name: str,
        workdir: Path,
        timing: Timing | None = None,
        seed: int | None = None,
    ) -> None:
        self.server, self.name, self.workdir = server, name, workdir
        self.timing = timing or Timing()
        self.schema = f"chaos_{name}_{uuid.uuid4().hex[:6]}"
        self.dsn = server.unix_dsn()
        self.proxies: dict[str, TcpProxy] = {}  # per replica, for those started via_proxy
        self.rng = random.Random(seed)
        self.replicas: dict[str, Replica] = {}
        self._started: list[Replica] = []  # every incarnation
        self.logs: list[Path] = []
        self.abandonments: list[Abandonment] = []
        self.marks: dict[str, datetime] = {}
        self.quiet: list[tuple[datetime, datetime]] = []  # fault-free intervals, for O5
        self.events: list[dict[str, Any]] = []
        # Injected latency: (from, to, added round trip in s, runners); rows those runners
        # hold meanwhile get 3 extra round trips in O6 (claim commit, pool check, the write).
        self.latency: list[tuple[datetime, datetime, float, list[str]]] = []
        self.monitor: Monitor | None = None
        self._db: psycopg.Connection[Any] | None = None
        self.started_mono = time.monotonic()
        (workdir / "logs").mkdir(parents=True, exist_ok=True)

    @property
    def o6_samples(self) -> list[tuple[datetime, list[tuple[str, float, str]]]]:
        return self.monitor.o6_samples if self.monitor is not None else []

    @property
    def running_samples(self) -> list[int]:
        return self.monitor.running_samples if self.monitor is not None else []

    # -- context ---------------------------------------------------------------------------

    def __enter__(self) -> ChaosRun:
        try:
            pgsched.Scheduler(dsn=self.dsn, schema=self.schema).migrate()
            self.q(_AUDIT_TABLES)
            self.q(_AUDIT_TRIGGER.format(schema=sql.Identifier(self.schema).as_string(None)))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.monitor is not None:
            self.monitor.stop()
        for rep in self._started:
            rep.kill()
            self.server.untrack(rep.pid)
        for proxy in self.proxies.values():
            proxy.close()
        if self._db is not None:
            with contextlib.suppress(Exception):
                self._db.close()

    # -- database --------------------------------------------------------------------------

    def q(self, text: str, params: Any = None, *, retry_for: float = 30.0) -> list[dict[str, Any]]:
        """Run a statement on the harness's direct connection (``{s}`` is the schema),
        reconnecting while the server restarts (for up to ``retry_for`` seconds)."""
        query = sql.SQL(text).format(s=sql.Identifier(self.schema))
        deadline = time.monotonic() + retry_for
        while True:
            try:
                if self._db is None or self._db.closed or self._db.broken:
                    self._db = psycopg.connect(
                        self.dsn, autocommit=True, row_factory=dict_row, connect_timeout=5
                    )
                with self._db.cursor() as cur:
                    cur.execute(query, params)
                    return cur.fetchall() if cur.description else []
            except psycopg.OperationalError:
                if self._db is not None:
                    with contextlib.suppress(Exception):
                        self._db.close()
                self._db = None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def db_now(self) -> datetime:
        now: datetime = self.q("SELECT clock_timestamp() AS t")[0]["t"]
        return now

    def mark(self, name: str) -> datetime:
        self.marks[name] = t = self.db_now()
        return t

    def event(self, kind: str, **fields: Any) -> None:
        at = fields.pop("at", None) or self.db_now()
        self.events.append({"kind": kind, "at": at.isoformat(), **fields})

    def in_flight(self) -> int:
        return int(
            self.q("SELECT count(*) AS n FROM {s}.cron_executions WHERE status = 'RUNNING'")[0]["n"]
        )

    def _seed(self) -> None:
        """Mark the current plan of every (job, scope) done, so that ``every_plan`` starts with
        the next one rather than catching up its whole window."""
        every = self.timing.every_s
        now = self.db_now()
        plan = datetime.fromtimestamp(math.floor(now.timestamp() / every) * every, UTC)
        for job in JOBS:
            for i in range(self.timing.scopes):
                self.q(
                    "INSERT INTO {s}.cron_executions (job_name, scope_kind, scope_id, plan_time,"
                    " trigger, status, attempt, max_attempts, runner_id, started_at, finished_at)"
                    " VALUES (%s, 'shard', %s, %s, 'schedule', 'SUCCESS', 1, %s, 'seed',"
                    " clock_timestamp(), clock_timestamp())",
                    (job, str(i), plan, self.timing.max_attempts),
                )

    # -- replicas --------------------------------------------------------------------------

    def _env(self, runner_id: str, via_proxy: bool, faketime: str | None) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PGSCHED_", "CHAOS_", "FAKETIME")) and k != "DATABASE_URL"
        }
        dsn = self.dsn
        if via_proxy:
            if runner_id not in self.proxies:
                self.proxies[runner_id] = TcpProxy(self.server.socket_path, f"proxy-{runner_id}")
            port = self.proxies[runner_id].port
            dsn = f"host=127.0.0.1 port={port} dbname=postgres user=postgres"
        env.update(
            PGSCHED_DSN=dsn,
            PGSCHED_SCHEMA=self.schema,
            PGSCHED_LOG_FORMAT="json",
            CHAOS_DIRECT_DSN=self.dsn,
            **self.timing.env(),
        )
        if faketime is not None:
            lib = faketime_library()
            assert lib, "libfaketime is not installed (apt-get install faketime)"
            env.update(
                LD_PRELOAD=lib,
                FAKETIME_TIMESTAMP_FILE=str(self.faketime_file(runner_id, faketime)),
                FAKETIME_CACHE_DURATION="1",  # re-read the file every second: clock jumps
                # Keep CLOCK_MONOTONIC real: a skewed or jumped wall clock is the scenario; a
                # monotonic clock never jumps.
                FAKETIME_DONT_FAKE_MONOTONIC="1",
            )
        return env

    def faketime_file(self, runner_id: str, offset: str | None = None) -> Path:
        """The file libfaketime reads the replica's offset from (``+30``, ``-30``, ``+3600``)."""
        path = self.workdir / f"faketime-{runner_id}"
        if offset is not None:
            path.write_text(f"{offset}\n")
        return path

    def start(
        self, runner_id: str, *, via_proxy: bool = False, faketime: str | None = None
    ) -> None:
        """Start (or restart) ``pgsched run`` as ``runner_id``."""
        old = self.replicas.get(runner_id)
        assert old is None or not old.alive, f"{runner_id} is still running"
        incarnation = 1 + sum(1 for rep in self._started if rep.name == runner_id)
        log = self.workdir / "logs" / f"{runner_id}.{incarnation}.log"
        self.logs.append(log)
        args = ["--schema", self.schema, "run", str(APP), "--http-port", "0"]
        rep = Replica(
            [*args, "--runner-id", runner_id],
            cwd=self.workdir,
            env=self._env(runner_id, via_proxy, faketime),
            name=runner_id,
            log=log,
        )
        self.server.track(rep.pid)
        self._started.append(rep)
        self.replicas[runner_id] = rep

    def begin(
        self, runner_ids: list[str], *, via_proxy: bool = False, faketime: dict[str, str] | None
    ) -> datetime:
        """Start the replicas with the jobs paused, wait until every one ticks, then seed and
        resume the jobs (so that they all begin together, with no backlog), and start the
        monitor; returns the start."""
        self.q(
            "INSERT INTO {s}.job_state (job_name, paused) SELECT unnest(%s::text[]), true",
            (list(JOBS),),
        )
        for rid in runner_ids:
            self.start(rid, via_proxy=via_proxy, faketime=(faketime or {}).get(rid))
        for rid in runner_ids:
            self.replicas[rid].wait_event("scheduler_started", 60)
        time.sleep(3 * self.timing.tick_s)  # every replica has ticked with the jobs paused
        self._seed()
        admin = pgsched.Admin(dsn=self.dsn, schema=self.schema)
        for job in JOBS:
            admin.resume(job)  # also wakes the replicas (NOTIFY)
        self.monitor = Monitor(self.dsn, self.schema, self.timing.o6_age_s)
        return self.mark("ready")

    def live(self) -> list[str]:
        return [rid for rid, rep in self.replicas.items() if rep.alive and not rep.suspended]

    def abandon(self, runner_id: str, kind: str, sig: signal.Signals | None) -> Abandonment:
        """Send ``sig`` (None: the caller already cut the replica off) and record, right
        after, the database time and the leases the replica held."""
        if sig is not None:
            self.replicas[runner_id].signal(sig)
        row = self.q(
            "SELECT clock_timestamp() AS t, ARRAY(SELECT id::text || ' ' || lease_token::text"
            " FROM {s}.cron_executions WHERE runner_id = %s AND status = 'RUNNING') AS leases",
            (runner_id,),
        )[0]
        leases = [tuple(uuid.UUID(p) for p in x.split()) for x in row["leases"]]
        event = Abandonment(row["t"], runner_id, kind, leases)  # type: ignore[arg-type]
        self.abandonments.append(event)
        self.event(kind, runner=runner_id, leases=len(leases), at=row["t"])
        return event

    # -- the end ---------------------------------------------------------------------------

    def drain(self, window: tuple[datetime, datetime], timeout: float) -> float:
        """Wait until every plan of the window has a terminal row (at most ``timeout``: O3
        reports those left without one); returns the seconds taken."""
        started = time.monotonic()
        expected = len(self.grid(window)) * len(JOBS) * self.timing.scopes

        def drained() -> bool:
            row = self.q(
                "SELECT count(*) AS n FROM {s}.cron_executions WHERE trigger = 'schedule'"
                " AND plan_time BETWEEN %s AND %s AND (status IN ('SUCCESS', 'CANCELLED')"
                " OR (status = 'FAILED' AND next_retry_at IS NULL))",
                window,
            )[0]
            return bool(row["n"] >= expected)

        with contextlib.suppress(AssertionError):
            wait_until(drained, timeout, "every plan of the window to end", interval=0.5)
        return time.monotonic() - started

    def stop_all(self, timeout: float = 20) -> dict[str, int | None]:
        """SIGCONT and SIGTERM every replica; SIGKILL what has not exited after ``timeout``."""
        for rep in self.replicas.values():
            rep.signal(signal.SIGCONT)
            rep.suspended = False
            rep.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        codes = {
            rid: rep.stop(max(0.1, deadline - time.monotonic()))
            for rid, rep in self.replicas.items()
        }
        if self.monitor is not None:
            self.monitor.stop()
        return codes

    def grid(self, window: tuple[datetime, datetime]) -> list[datetime]:
        every = self.timing.every_s
        first = math.ceil(window[0].timestamp() / every)
        last = math.floor(window[1].timestamp() / every)
        return [datetime.fromtimestamp(k * every, UTC) for k in range(first, last + 1)]

    def finish(
        self, window: tuple[datetime, datetime], drain_timeout: float | None = None
    ) -> dict[str, Any]:
        """Let the window's plans finish, stop the replicas, and compute the figures."""
        t = self.timing
        drained = self.drain(window, drain_timeout or 3 * (t.run_timeout_s + t.stale_timeout_s))
        codes = self.stop_all()
        figures = evaluate(self, window)
        figures["drain_s"] = round(drained, 1)
        figures["exit_codes"] = codes
        figures["wall_s"] = round(time.monotonic() - self.started_mono, 1)
        return figures
