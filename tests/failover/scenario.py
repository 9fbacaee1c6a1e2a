"""The harness of the failover scenarios: a private primary and hot standby
(``tests/support/postgres.py``), optional TCP proxies (``tests/support/proxy.py``) in front of
the primary for the standby's replication connection or for the replicas, two real
``pgsched run`` replicas of ``app.py`` on the multi-host DSN
``host=127.0.0.1,127.0.0.1 port=P1,P2 ... target_session_attrs=read-write``, a side schema on
a separate server (the tests' own database, ``pg_dsn``) where the handlers record their
executions, and a thread sampling each replica's /healthz every 0.5 s.

CI-sized by default (each scenario well under 30 s); ``PGSCHED_FAILOVER_LONG=1`` runs each
phase at full length (the outage stays under the jobs' 4 s stale_timeout, so what it
measures is the failover's own loss, not leases gone stale in a long outage).
``PGSCHED_FAILOVER_FIGURES=path.json`` merges each scenario's figures into that file.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

import pgsched
from tests.failover import figures as fig
from tests.support.net import free_port, http
from tests.support.partition import as_uid, open_dir
from tests.support.postgres import REPLICATION, PrivateServer
from tests.support.proxy import TcpProxy
from tests.support.replica import Replica
from tests.support.waiting import wait_until

APP = Path(__file__).with_name("app.py")
SCHEMA = "fo"
WORK_SCOPES = [str(i) for i in range(3)]
TX_SCOPES = [str(i) for i in range(2)]


@dataclass(frozen=True)
class Timing:
    """How long each phase lasts: CI-sized, or full length (``PGSCHED_FAILOVER_LONG=1``)."""

    warm_s: float  # running normally before the fault
    outage_s: float  # from the fault to the promotion (a failover manager's detection)
    after_s: float  # running on the new primary once work resumed
    drain_s: float  # at most, for the plans due until then to finish
    stuck_s: float = 30.0  # a replica that ran nothing this long is stuck

    @classmethod
    def from_env(cls) -> Timing:
        if os.environ.get("PGSCHED_FAILOVER_LONG") == "1":
            return cls(warm_s=20, outage_s=3, after_s=60, drain_s=60)
        return cls(warm_s=2, outage_s=1, after_s=4, drain_s=8)


def caught_up(primary: PrivateServer, standby: PrivateServer) -> bool:
    (sent,) = primary.sql("SELECT pg_current_wal_lsn()::text")[0]
    (replayed,) = standby.sql(
        "SELECT pg_wal_lsn_diff(pg_last_wal_replay_lsn(), %s::pg_lsn) >= 0", (sent,)
    )[0]
    return bool(replayed)


class FailoverRun:
    """One scenario: :meth:`setup`, :meth:`warm_up`, the test's own fault, :meth:`promote`,
    :meth:`wait_resumed`, :meth:`run_after`, then :func:`measure` for the figures and
    :func:`report` to publish and check them; :meth:`close` (always) removes everything."""

    def __init__(self, name: str, tmp_path: Path, side: tuple[str, str], **options: Any) -> None:
        self.name, self.tmp = name, tmp_path
        # The separate server (the tests' own database) and a schema of this test's there.
        self.side_dsn, self.side_schema = side
        self.sync = options.get("sync", False)
        # the server's synchronous_commit when sync ("local": only what asks for it waits)
        self.sync_commit = str(options.get("sync_commit", "on"))
        self.replica_env: dict[str, str] = dict(options.get("replica_env", {}))
        self.lagging = options.get("lagging", False)
        self.via_proxy = options.get("via_proxy", False)
        self.stale_s = float(options.get("stale_s", 4))  # the jobs' stale_timeout
        self.drains = bool(options.get("drains", True))  # wait for the counted plans to end
        self.runners: tuple[str, ...] = tuple(options.get("runners", ("r1", "r2")))
        # The runner run as another user (tests.support.partition), whose packets a test drops.
        self.cut: str | None = options.get("cut")
        self.timing = Timing.from_env()
        self.servers: list[PrivateServer] = []
        self.proxies: list[TcpProxy] = []
        self.replicas: dict[str, Replica] = {}
        self.http: dict[str, int] = {}
        self.started: dict[str, float] = {}
        self.samples: list[tuple[float, str, int | None]] = []
        self.marks: dict[str, float] = {}
        self._sampling = threading.Event()
        self._sampler: threading.Thread | None = None
        self.old: PrivateServer
        self.new: PrivateServer
        self.serving: PrivateServer  # the primary: the old one until the promotion
        self.repl_proxy: TcpProxy | None = None
        self.client_proxy: TcpProxy | None = None

    # -- set-up -----------------------------------------------------------------------------

    def setup(self) -> None:
        self.old = PrivateServer.create(REPLICATION, system_first=True)
        self.servers.append(self.old)
        self.serving = self.old
        if self.lagging:
            self.repl_proxy = self._proxy(self.old.port)
        upstream = self.repl_proxy.port if self.repl_proxy else None
        self.new = self.old.standby(upstream_port=upstream)
        self.servers.append(self.new)
        if self.sync:
            self.old.sql("ALTER SYSTEM SET synchronous_standby_names = 'standby'")
            self.old.sql(
                sql.SQL("ALTER SYSTEM SET synchronous_commit = {}").format(
                    sql.Literal(self.sync_commit)
                )
            )
            self.old.sql("SELECT pg_reload_conf()")
        wait_until(self._streaming, 20, "the standby to stream (sync when asked)")
        with pgsched.Admin(self.old.dsn(), schema=SCHEMA) as admin:
            admin.migrate()
        self.old.sql(
            sql.SQL(
                "CREATE TABLE {}.tx_effects (scope text, plan_time timestamptz, runner text,"
                " execution_id uuid, fencing bigint, at timestamptz DEFAULT clock_timestamp())"
            ).format(sql.Identifier(SCHEMA))
        )
        self._side_setup()
        if self.via_proxy:
            self.client_proxy = self._proxy(self.old.port)
        wait_until(lambda: caught_up(self.old, self.new), 20, "the standby to catch up")
        for runner in self.runners:
            self._start(runner)
        self._sampler = threading.Thread(target=self._sample, name="fo-healthz", daemon=True)
        self._sampler.start()

    def _proxy(self, port: int) -> TcpProxy:
        proxy = TcpProxy(port)
        self.proxies.append(proxy)
        return proxy

    def _streaming(self) -> bool:
        rows = self.old.sql("SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'")
        return bool(rows) and (not self.sync or rows[0][0] == "sync")

    def _side(self, text: str | sql.Composed, params: Any = None) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.side_dsn, autocommit=True, connect_timeout=5) as conn:
            cur = conn.execute(text, params)
            return cur.fetchall() if cur.description else []

    def _side_setup(self) -> None:
        ident = sql.Identifier(self.side_schema)
        self._side(sql.SQL("CREATE SCHEMA {}").format(ident))
        self._side(
            sql.SQL(
                "CREATE TABLE {}.effects (kind text, scope text, plan_time timestamptz,"
                " runner text, execution_id uuid, attempt int, fencing bigint,"
                " at timestamptz DEFAULT clock_timestamp())"
            ).format(ident)
        )

    def dsn(self) -> str:
        first = self.client_proxy.port if self.client_proxy else self.old.port
        return (
            f"host=127.0.0.1,127.0.0.1 port={first},{self.new.port} dbname=postgres "
            "user=postgres target_session_attrs=read-write"
        )

    def _start(self, runner: str) -> None:
        port = free_port()
        env = {
            "PATH": "/usr/bin:/bin",
            "PGSCHED_DSN": self.dsn(),
            "PGSCHED_LOG_FORMAT": "json",
            "PGSCHED_HEALTH_TIMEOUT": "20s",
            **self.replica_env,
            "FO_SIDE_DSN": self.side_dsn,
            "FO_SIDE_SCHEMA": self.side_schema,
            "FO_SCHEMA": SCHEMA,
            "FO_WORK_SCOPES": str(len(WORK_SCOPES)),
            "FO_TX_SCOPES": str(len(TX_SCOPES)),
            "FO_STALE_TIMEOUT": f"{self.stale_s:g}s",
        }
        args = ["--schema", SCHEMA, "run", str(APP), "--runner-id", runner]
        options: dict[str, Any] = {"cwd": self.tmp}
        if runner == self.cut:  # another user's process, in a directory it may use
            home = open_dir(f"fo-{runner}-")
            env["HOME"] = str(home)
            options = {"cwd": home, "log": self.tmp / f"{runner}.log", "wrap": as_uid()}
        self.replicas[runner] = Replica(
            [*args, "--http-port", str(port)], env=env, name=runner, **options
        )
        self.http[runner], self.started[runner] = port, time.time()

    def _sample(self) -> None:
        while not self._sampling.wait(0.5):
            for runner, port in self.http.items():
                status: int | None
                try:
                    status = http("GET", f"http://127.0.0.1:{port}/healthz", timeout=2).status
                except OSError:  # not answering at all
                    status = None
                self.samples.append((time.time(), runner, status))

    # -- phases -----------------------------------------------------------------------------

    def successes(self, node: PrivateServer, job: str, since: float = 0.0) -> int:
        rows = node.sql(
            sql.SQL(
                "SELECT count(*) FROM {}.cron_executions WHERE job_name = %s"
                " AND status = 'SUCCESS' AND started_at > to_timestamp(%s)"
            ).format(sql.Identifier(SCHEMA)),
            (job, since),
        )
        return int(rows[0][0])

    def ran_twice(self, job: str) -> bool:
        return self.successes(self.old, job) >= 2

    def warm_up(self) -> None:
        """Both jobs running on the primary, then a fixed phase of normal work."""
        for job in ("work", "tx"):
            wait_until(partial(self.ran_twice, job), 30, f"{job} to run")
        self.marks["grid_start"] = time.time() + 1
        time.sleep(self.timing.warm_s)  # a fixed-length phase of normal work

    def fault(self) -> None:
        self.marks["fault"] = time.time()

    def promote(self, outage_s: float | None = None) -> None:
        """After the outage phase (``outage_s``, by default the timing's), promote the
        standby; mark the time."""
        time.sleep(self.timing.outage_s if outage_s is None else outage_s)  # detection time
        self.new.promote()
        self.serving = self.new
        self.marks["promoted"] = time.time()

    def wait_resumed(self, timeout: float = 10.0) -> float | None:
        """Seconds from the promotion until the first run started after it finished with
        SUCCESS on the new primary; None when none did within ``timeout``."""
        promoted = self.marks["promoted"]
        try:
            wait_until(
                lambda: self.successes(self.new, "work", promoted) >= 1,
                timeout,
                "work to resume on the new primary",
            )
        except AssertionError:
            return None
        rows = self.new.sql(
            sql.SQL(
                "SELECT extract(epoch FROM min(finished_at))::float8 FROM {}.cron_executions"
                " WHERE status = 'SUCCESS' AND started_at > to_timestamp(%s)"
            ).format(sql.Identifier(SCHEMA)),
            (promoted,),
        )
        self.marks["resumed"] = float(rows[0][0])
        return round(self.marks["resumed"] - promoted, 2)

    def run_after(self) -> None:
        """A fixed phase of work on the new primary; the plans due until its end (less 2 s)
        are the ones counted."""
        time.sleep(self.timing.after_s)
        self.marks["grid_end"] = time.time() - 2

    def close(self) -> None:
        self._sampling.set()
        for replica in self.replicas.values():
            replica.kill()
        for proxy in self.proxies:
            proxy.close()
        for server in reversed(self.servers):
            server.close()
        with contextlib.suppress(psycopg.Error):
            drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
            self._side(drop.format(sql.Identifier(self.side_schema)))

    def stop_replicas(self) -> dict[str, int | None]:
        """SIGTERM the replicas; their exit codes (None: still running after 10 s, killed)."""
        for replica in self.replicas.values():
            replica.signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        codes = {
            runner: replica.stop(max(0.1, deadline - time.monotonic()))
            for runner, replica in self.replicas.items()
        }
        self._sampling.set()
        return codes

    def logs(self) -> str:
        return "".join(replica.output() for replica in self.replicas.values())


# -- what the scenario measured ---------------------------------------------------------------


def _leased_after(node: PrivateServer, at: float) -> set[int]:
    """The fencing tokens of leases ``node`` handed out after ``at`` (epoch seconds): claims
    and steals of its ledger rows and of the attempts its attempt history keeps."""
    rows = node.sql(
        sql.SQL(
            "SELECT fencing_token FROM {s}.cron_executions WHERE started_at > to_timestamp(%s)"
            " UNION SELECT fencing_token FROM {s}.cron_attempts"
            " WHERE started_at > to_timestamp(%s)"
        ).format(s=sql.Identifier(SCHEMA)),
        (at, at),
    )
    return {int(r[0]) for r in rows}


def _ledger(node: PrivateServer) -> list[tuple[str, str, float, str]]:
    """(job, scope, plan time, status) of every row of ``node``'s ledger."""
    rows = node.sql(
        sql.SQL(
            "SELECT job_name, scope_id, extract(epoch FROM plan_time)::float8, status"
            " FROM {}.cron_executions"
        ).format(sql.Identifier(SCHEMA))
    )
    return [(str(j), str(s), float(t), str(st)) for j, s, t, st in rows]


def _tx_effects(node: PrivateServer, since: float = 0.0) -> list[tuple[str, float]]:
    rows = node.sql(
        sql.SQL(
            "SELECT scope, extract(epoch FROM plan_time)::float8 FROM {}.tx_effects"
            " WHERE at > to_timestamp(%s)"
        ).format(sql.Identifier(SCHEMA)),
        (since,),
    )
    return [(str(s), float(t)) for s, t in rows]


def side_effects(run: FailoverRun) -> list[dict[str, Any]]:
    rows = run._side(
        sql.SQL(
            "SELECT kind, scope, extract(epoch FROM plan_time)::float8, runner, fencing,"
            " extract(epoch FROM at)::float8 FROM {}.effects"
        ).format(sql.Identifier(run.side_schema))
    )
    keys = ("kind", "scope", "plan", "runner", "fencing", "at")
    return [dict(zip(keys, row, strict=True)) for row in rows]


def _succeeded(ledger: list[tuple[str, str, float, str]], job: str) -> set[tuple[str, float]]:
    return {(s, t) for j, s, t, st in ledger if j == job and st == "SUCCESS"}


def drain(run: FailoverRun) -> bool:
    """Wait (at most ``drain_s``) until every plan of the counted window has a SUCCESS row on
    the new primary; False when some never got one."""
    plans = fig.grid(run.marks["grid_start"], run.marks["grid_end"])

    def done() -> bool:
        ledger = _ledger(run.serving)
        return all(
            fig.lost(plans, scopes, _succeeded(ledger, job), set()) == 0
            for job, scopes in (("work", WORK_SCOPES), ("tx", TX_SCOPES))
        )

    try:
        wait_until(done, run.timing.drain_s, "the counted plans to finish", interval=0.5)
    except AssertionError:
        return False
    return True


def with_status(node: PrivateServer, status: str) -> int:
    """Rows of ``node``'s ledger in ``status``."""
    rows = node.sql(
        sql.SQL("SELECT count(*) FROM {}.cron_executions WHERE status = %s").format(
            sql.Identifier(SCHEMA)
        ),
        (status,),
    )
    return int(rows[0][0])


def stale_running(node: PrivateServer) -> int:
    """Rows RUNNING past their ``stale_after`` (their lease not renewed for stale_timeout)."""
    rows = node.sql(
        sql.SQL(
            "SELECT count(*) FROM {}.cron_executions WHERE status = 'RUNNING'"
            " AND stale_after < clock_timestamp()"
        ).format(sql.Identifier(SCHEMA))
    )
    return int(rows[0][0])


def measure(run: FailoverRun, resumed_s: float | None) -> dict[str, Any]:
    """The scenario's figures; stops the replicas (after counting what needs them alive)."""
    drained = drain(run) if resumed_s is not None and run.drains else False
    stale = stale_running(run.serving)
    alive = all(replica.alive for replica in run.replicas.values())
    codes = run.stop_replicas()
    running = with_status(run.serving, "RUNNING")
    ledger, effects = _ledger(run.serving), side_effects(run)
    plans = fig.grid(run.marks["grid_start"], run.marks["grid_end"])
    work = [(e["scope"], e["plan"]) for e in effects if e["kind"] == "work"]
    seen = [(e["scope"], e["plan"]) for e in effects if e["kind"] == "tx_seen"]
    tx = _tx_effects(run.serving)
    activity: dict[str, list[float]] = {}
    for e in effects:
        activity.setdefault(e["runner"], []).append(e["at"])
    healthy_stuck, stuck = fig.healthy_while_stuck(
        run.samples, activity, run.started, run.timing.stuck_s
    )
    figures: dict[str, Any] = {
        "resumed_s": resumed_s,
        "work_reruns": fig.reruns(work)[0],
        "work_extra_effects": fig.reruns(work)[1],
        "work_reruns_finished_before_fault": fig.reruns_finished_before(
            [e for e in effects if e["kind"] == "work"], run.marks["fault"] - 1.0
        ),
        "work_reruns_finished_before_fault_same_runner": fig.reruns_finished_before(
            [e for e in effects if e["kind"] == "work"],
            run.marks["fault"] - 1.0,
            same_runner=True,
        ),
        "tx_duplicates": fig.reruns(tx)[0],
        "tx_reinvoked": fig.reruns(seen)[0],
        "work_lost": fig.lost(plans, WORK_SCOPES, _succeeded(ledger, "work"), set(work)),
        "tx_lost": fig.lost(plans, TX_SCOPES, _succeeded(ledger, "tx"), set(tx)),
        "plans_counted": len(plans) * (len(WORK_SCOPES) + len(TX_SCOPES)),
        "drained": drained,
        "stale_running": stale,
        "fencing_regressions": fig.fencing_regressions(
            effects, run.marks["fault"], _leased_after(run.serving, run.marks["promoted"])
        ),
        "healthz_samples": len(run.samples),
        "healthz_503": sum(1 for _, _, s in run.samples if s == 503),
        "healthz_200_while_stuck": healthy_stuck,
        "samples_while_stuck": stuck,
        "replicas_alive": alive,
        "exit_codes": codes,
        "clean_exits": all(code == 0 for code in codes.values()),
        "running_after_stop": running,
    }
    figures.update(_logged(run.logs()))
    return figures


def _logged(text: str) -> dict[str, int]:
    """What the replicas' logs tell."""
    return {
        "tracebacks": _tracebacks(text),
        "handler_errors": text.count('"handler_raised"'),
        "tick_errors": text.count('"tick_error"'),
        "writer_retries": text.count('"writer_retry"'),
        "stale_stolen": text.count('"outcome": "stole"'),  # stale leases taken over
        # transactional runs rolled back: their SUCCESS write found no row holding the lease
        # (on another server than the one that granted it, say)
        "tx_rolled_back": text.count("SUCCESS write matched no row holding this lease"),
        "database_changed": text.count('"database_changed"'),
    }


def _tracebacks(text: str) -> int:
    """Tracebacks in the replicas' output, but for the handlers' own exceptions (logged with
    their traceback as ``handler_raised``: a handler whose database went away raises)."""
    return sum(
        1 for line in text.splitlines() if "Traceback" in line and '"handler_raised"' not in line
    )


def old_primary_writes(run: FailoverRun) -> dict[str, int]:
    """What landed on the old primary (still running) since it came back: ledger rows,
    transactional effects, and those of them whose plan committed on the new primary too (a
    transactional plan run once on each server)."""
    back = run.marks["back"]
    rows = run.old.sql(
        sql.SQL(
            "SELECT count(*) FROM {}.cron_executions WHERE updated_at > to_timestamp(%s)"
        ).format(sql.Identifier(SCHEMA)),
        (back,),
    )
    old_tx, new_tx = _tx_effects(run.old, back), set(_tx_effects(run.new))
    return {
        "old_primary_rows": int(rows[0][0]),
        "old_primary_tx_effects": len(old_tx),
        "tx_on_both_servers": len(set(old_tx) & new_tx),
    }


def report(run: FailoverRun, figures: dict[str, Any], checks: list[fig.Check]) -> None:
    """Publish the figures, then assert the checks."""
    failed = fig.verdict(figures, checks)
    fig.publish(run.name, figures)
    assert not failed, f"{run.name}: " + "; ".join(failed)


# What every scenario asserts today: the replicas live through it, log no Traceback, and the
# transactional job never commits its effect twice.
TODAY = [
    fig.Check("replicas_alive", "==", True),
    fig.Check("tracebacks", "==", 0),
    fig.Check("tx_duplicates", "==", 0),
]
