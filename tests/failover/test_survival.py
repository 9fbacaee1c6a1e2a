"""A replica's background tasks on a database that refuses writes or drops its connections:
they never end, slots are released, the outcomes land once the database takes writes again,
and /healthz and /readyz say what is going on meanwhile. On a private primary (the tests
make it read-only, as a switchover's first step does)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

import pgsched
from pgsched._engine.runtime import Runtime
from tests.support.net import http
from tests.support.postgres import PrivateServer
from tests.support.threads import serving
from tests.support.waiting import wait_until

pytestmark = pytest.mark.failover

SCOPES = [pgsched.Scope("t", name) for name in ("a", "b", "c")]


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    """GET ``path`` of a replica's HTTP server: status and JSON body."""
    reply = http("GET", f"http://127.0.0.1:{port}{path}")
    return reply.status, reply.json()


def _scheduler(primary: PrivateServer, **options: Any) -> pgsched.Scheduler:
    schema = f"f_{uuid.uuid4().hex[:10]}"
    options.setdefault("tick_interval", 0.2)
    options.setdefault("shutdown_grace", "2s")
    s = pgsched.Scheduler(dsn=primary.dsn(), schema=schema, runner_id="r1", **options)
    s.migrate()
    return s


def _statuses(primary: PrivateServer, schema: str) -> list[tuple[str, str]]:
    rows = primary.sql(
        f'SELECT scope_id, status FROM "{schema}".cron_executions ORDER BY scope_id, plan_time'
    )
    return [(str(a), str(b)) for a, b in rows]


def _runtime(s: pgsched.Scheduler) -> Runtime:
    runtime = s._runtime
    assert runtime is not None
    return runtime


def _loops_alive(runtime: Runtime) -> bool:
    return bool(runtime._loops) and not any(task.done() for task in runtime._loops)


def _gated_job(s: pgsched.Scheduler, gate: threading.Event, **options: Any) -> list[str]:
    """A job of three scopes whose handlers wait for ``gate``; returns the scopes entered."""
    entered: list[str] = []

    def gated(run: pgsched.Run) -> int:
        entered.append(run.scope.id)
        assert gate.wait(60)
        return 1

    s.register(gated, name="gated", every="1h", scopes=SCOPES, **options)
    return entered


def test_outcomes_wait_out_a_read_only_primary_and_health_tells_it(primary: PrivateServer) -> None:
    s = _scheduler(primary, max_concurrency=4, health_timeout="2s")
    gate = threading.Event()
    entered = _gated_job(s, gate)
    with serving(s) as port:
        wait_until(lambda: len(entered) == 3, 15, "three handlers running")
        runtime = _runtime(s)
        assert probe(port, "/healthz")[0] == 200
        assert probe(port, "/readyz")[0] == 200

        primary.set_read_only(True)
        gate.set()  # the outcomes now meet SQLSTATE 25006, or a pool that refuses the server

        def unhealthy() -> dict[str, Any] | None:
            status, body = probe(port, "/healthz")
            tasks = {f["task"] for f in body["failing"]}
            return body if status == 503 and {"tick", "writer"} <= tasks else None

        body = wait_until(unhealthy, 20, "/healthz 503 naming the tick loop and the writer")
        failing = {f["task"]: f for f in body["failing"]}
        assert failing["writer"]["failing_for_s"] > 2.0
        assert failing["writer"]["failing_since"].endswith("+00:00")
        _, ready = wait_until(
            lambda: (r := probe(port, "/readyz"))[0] == 503 and r, 15, "/readyz 503"
        )
        assert "not writable" in ready["reason"], ready
        assert len(runtime.leases) == 3, "slots are held until the outcomes are written"
        assert _loops_alive(runtime), "a background task ended on a database error"
        assert {st for _, st in _statuses(primary, s.schema)} == {"RUNNING"}

        primary.set_read_only(False)
        back = time.monotonic()
        wait_until(
            lambda: (
                _statuses(primary, s.schema)[:3]
                == [("a", "SUCCESS"), ("b", "SUCCESS"), ("c", "SUCCESS")]
            ),
            30,
            "the three outcomes written once the primary is writable again",
        )
        landed_s = time.monotonic() - back
        wait_until(lambda: len(runtime.leases) == 0, 10, "the slots released")
        wait_until(lambda: probe(port, "/healthz")[0] == 200, 15, "/healthz 200 again")
        wait_until(lambda: probe(port, "/readyz")[0] == 200, 15, "/readyz 200 again")
        assert _loops_alive(runtime)
    print(f"outcomes landed {landed_s:.2f} s after the primary took writes again")


def test_a_refused_row_falls_back_and_never_holds_its_slot(primary: PrivateServer) -> None:
    """A terminal write the database refuses for the row itself (not the connection): the
    batch is split, the row written as FAILED invalid_result; refused again, the outcome is
    given up and its slot freed; the other rows are written as usual."""
    s = _scheduler(primary, max_concurrency=4)
    table = f'"{s.schema}".cron_executions'
    function = f'"{s.schema}".refuse'
    primary.sql(
        f"""CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.scope_id = 'b' AND NEW.status = 'SUCCESS' OR NEW.scope_id = 'c'
               AND NEW.status <> 'RUNNING' THEN
                RAISE EXCEPTION 'refused for %', NEW.scope_id USING ERRCODE = 'check_violation';
            END IF;
            RETURN NEW;
        END $$"""
    )
    primary.sql(
        f"CREATE TRIGGER refuse BEFORE UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION {function}()"
    )
    gate = threading.Event()
    gate.set()
    _gated_job(s, gate)
    with serving(s) as port:
        wait_until(
            lambda: [st for _, st in _statuses(primary, s.schema)][:2] == ["SUCCESS", "FAILED"],
            20,
            "a written, b failed",
        )
        runtime = _runtime(s)
        wait_until(lambda: len(runtime.leases) == 0, 10, "every slot released, c's too")
        assert _loops_alive(runtime)
        assert probe(port, "/healthz")[0] == 200
    rows = primary.sql(
        f"SELECT scope_id, status, error_code FROM {table} ORDER BY scope_id, plan_time"
    )
    assert rows[:3] == [
        ("a", "SUCCESS", None),
        ("b", "FAILED", "invalid_result"),
        ("c", "RUNNING", None),  # closed out by the stale sweep once its lease lapses
    ]


def test_heartbeats_and_ticks_outlive_terminated_connections(primary: PrivateServer) -> None:
    s = _scheduler(primary, max_concurrency=4)
    gate = threading.Event()
    entered = _gated_job(s, gate, run_timeout="20s", stale_timeout="30s", heartbeat_interval="1s")
    table = f'"{s.schema}".cron_executions'

    def beats() -> list[Any]:
        return [r[0] for r in primary.sql(f"SELECT heartbeat_at FROM {table} ORDER BY scope_id")]

    with serving(s) as port:
        wait_until(lambda: len(entered) == 3, 15, "three handlers running")
        runtime = _runtime(s)
        for _ in range(3):
            before = beats()
            killed = primary.sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE 'pgsched %'"
            )
            assert killed, "no pgsched connection to terminate"

            def renewed(before: list[Any] = before) -> bool:
                return all(a > b for a, b in zip(beats(), before, strict=True))

            wait_until(renewed, 15, "every lease renewed after its connection was terminated")
            assert _loops_alive(runtime)
        gate.set()
        wait_until(
            lambda: {st for _, st in _statuses(primary, s.schema)[:3]} == {"SUCCESS"},
            15,
            "the outcomes written",
        )
        wait_until(lambda: len(runtime.leases) == 0, 10, "the slots released")
        assert probe(port, "/healthz")[0] == 200


def test_a_connection_that_met_25006_is_discarded_and_the_write_retried(
    primary: PrivateServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The server refuses the terminal writes with SQLSTATE 25006 (a trigger stands in for a
    server turned read-only between the pool's check and the statement): each connection
    that met it is closed, never lent again, and the write is retried until it lands."""
    s = _scheduler(primary, max_concurrency=4)
    table, flag = f'"{s.schema}".cron_executions', f'"{s.schema}".refuse_writes'
    function = f'"{s.schema}".read_only'
    primary.sql(f"CREATE TABLE {flag} (on_ boolean)")
    primary.sql(f"INSERT INTO {flag} VALUES (true)")
    primary.sql(
        f"""CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF NEW.status <> 'RUNNING' AND EXISTS (SELECT FROM {flag}) THEN
                RAISE EXCEPTION 'cannot execute UPDATE in a read-only transaction'
                    USING ERRCODE = 'read_only_sql_transaction';
            END IF;
            RETURN NEW;
        END $$"""
    )
    primary.sql(
        f"CREATE TRIGGER read_only BEFORE UPDATE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {function}()"
    )
    gate = threading.Event()
    entered = _gated_job(s, gate)
    caplog.set_level("INFO", logger="psycopg.pool")
    with serving(s):
        wait_until(lambda: len(entered) == 3, 15, "three handlers running")
        runtime = _runtime(s)
        gate.set()
        wait_until(
            lambda: sum("discarding closed connection" in r.message for r in caplog.records) >= 2,
            15,
            "two connections that met 25006 discarded by the pool",
        )
        assert runtime.writer.failing_since is not None
        assert len(runtime.leases) == 3 and _loops_alive(runtime)
        primary.sql(f"DELETE FROM {flag}")
        wait_until(
            lambda: {st for _, st in _statuses(primary, s.schema)[:3]} == {"SUCCESS"},
            15,
            "the outcomes written once the server takes them",
        )
        wait_until(lambda: len(runtime.leases) == 0, 10, "the slots released")
        assert runtime.writer.failing_since is None


def test_one_jobs_failing_claims_do_not_make_the_replica_unhealthy(primary: PrivateServer) -> None:
    """/healthz is about the database serving the replica, not about one job's bug: a job
    whose scopes() raises at every tick fails its claims, the others run, and past the
    health timeout the replica still answers 200 (a restart would not help)."""
    s = _scheduler(primary, health_timeout="1s")

    def broken_scopes(now: Any) -> list[pgsched.Scope]:
        raise RuntimeError("a bug in the scopes function")

    s.register(lambda run: None, name="broken", every="1s", scopes=broken_scopes)
    s.register(lambda run: None, name="fine", every="1s")
    with serving(s) as port:
        runtime = _runtime(s)
        started = time.monotonic()
        wait_until(
            lambda: runtime.report.errors >= 5 and time.monotonic() - started > 2.0,
            15,
            "failed claims for longer than twice the health timeout",
        )
        status, body = probe(port, "/healthz")
        assert status == 200 and body["failing"] == [], body
        assert runtime.report.succeeded >= 1, "the other job stopped running"


def test_work_resumes_within_two_seconds_of_the_database_coming_back(
    primary: PrivateServer,
) -> None:
    """However long the outage (here 20 s: long enough for doubling backoffs to reach 8 s
    and more), the first run after the server takes connections again comes within 2 s."""
    s = _scheduler(primary)
    ran: list[float] = []
    s.register(lambda run: ran.append(time.monotonic()), name="often", every="0.5s")
    with serving(s):
        wait_until(lambda: len(ran) >= 2, 20, "the job to run")
        primary.stop()
        down = time.monotonic()
        time.sleep(20)  # the outage itself: what is measured comes after it
        primary.start()
        back, seen = time.monotonic(), len(ran)
        assert back - down >= 20
        wait_until(lambda: len(ran) > seen, 15, "a run after the database came back")
        assert ran[seen] - back <= 2.0, f"first run {ran[seen] - back:.2f} s after the restart"
