"""pgsched through a real PgBouncer in transaction mode, as docs/pgbouncer.md describes
(Debian's ``pgbouncer``; ``.ci/run`` installs it). The test starts its own pgbouncer on a free
port in front of the test database; replicas, the handler's own writes and every command go
through it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.acceptance.conftest import APP, Replicas, victim_first_attempt
from tests.support.net import free_port
from tests.support.rows import in_schema
from tests.support.waiting import wait_until


def _pgbouncer() -> str:
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
    )
    if found is None:
        pytest.fail("pgbouncer is not installed (apt-get install pgbouncer; .ci/run does)")
    return found


@pytest.fixture
def pooled_dsn(pg_dsn: str) -> Iterator[str]:
    """A DSN through a private pgbouncer (pool_mode=transaction) in front of ``pg_dsn``."""
    target = conninfo_to_dict(pg_dsn)
    host = str(target.get("host") or "127.0.0.1")
    if host.startswith("/"):
        host = "127.0.0.1"  # the embedded server also listens on loopback
    port, user = free_port(), str(target.get("user") or "postgres")
    dbname = str(target.get("dbname") or "postgres")
    # pgbouncer refuses to run as root: it runs as postgres, which must reach and write this
    # directory (pytest's tmp_path is private to the test's user).
    workdir = Path(tempfile.mkdtemp(prefix="pgsched-pgbouncer-"))
    workdir.chmod(0o777)
    (workdir / "users.txt").write_text(f'"{user}" "{target.get("password") or ""}"\n')
    upstream = f"host={host} port={target.get('port') or 5432} dbname={dbname}"
    (workdir / "pgbouncer.ini").write_text(
        f"[databases]\n{dbname} = {upstream}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {workdir / 'users.txt'}\n"
        "pool_mode = transaction\nmax_client_conn = 500\ndefault_pool_size = 20\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
        f"logfile = {workdir / 'pgbouncer.log'}\npidfile = {workdir / 'pgbouncer.pid'}\n"
    )
    command = [_pgbouncer(), str(workdir / "pgbouncer.ini")]
    if os.geteuid() == 0:
        command[1:1] = ["-u", "postgres"]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    dsn = make_conninfo(pg_dsn, host="127.0.0.1", port=str(port), dbname=dbname, user=user)
    try:

        def answers() -> bool:
            try:
                with psycopg.connect(dsn, autocommit=True, connect_timeout=2) as conn:
                    conn.execute("SELECT 1")
                return True
            except psycopg.OperationalError:
                assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
                return False

        wait_until(answers, 15, "pgbouncer to answer")
        yield dsn
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(workdir, ignore_errors=True)


def _cli(dsn: str, schema: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PGSCHED_DSN", "DATABASE_URL")}
    return subprocess.run(
        [sys.executable, "-m", "pgsched", "--dsn", dsn, "--schema", schema, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**env, "PGSCHED_TRANSACTION_POOLING": "1"},
    )


def _fast_plans(db: psycopg.Connection[tuple[object, ...]], schema: str) -> int:
    found = in_schema(
        db, schema, "SELECT count(DISTINCT plan_time) FROM {s}.ledger WHERE job='fast'"
    )
    return int(found[0][0])


def test_replicas_and_commands_through_a_transaction_pooling_pgbouncer(
    pooled_dsn: str, schema: str, db: psycopg.Connection[tuple[object, ...]], tmp_path: Path
) -> None:
    migrated = _cli(pooled_dsn, schema, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    db.execute(
        sql.SQL(
            "CREATE TABLE {}.ledger (job text, scope_id text, plan_time timestamptz,"
            " attempt int, runner_id text, at timestamptz DEFAULT clock_timestamp())"
        ).format(sql.Identifier(schema))
    )
    # The replica killed below may hold `fast` leases too: short leases let them be taken
    # over (or closed) within seconds, so `fast` goes on through the pooler.
    fast = '@scheduler.job(every="1s", scopes='
    assert fast in APP
    app = APP.replace(
        fast, '@scheduler.job(every="1s", run_timeout="3s", stale_timeout="4s", scopes='
    )
    (tmp_path / "app.py").write_text(app)
    # warning level: the replicas' output printed below when the test fails stays short
    quiet = {"PGSCHED_TRANSACTION_POOLING": "1", "PGSCHED_LOG_LEVEL": "warning"}
    group = Replicas(pooled_dsn, schema, tmp_path, quiet)
    try:
        for rid in ("p0", "p1", "p2"):
            group.start(rid)

        # A replica killed while it holds the victim's lease: stolen through the pooler.
        holder = str(victim_first_attempt(db, schema)[1])
        group.members[holder].signal(signal.SIGKILL)
        killed_at = db.execute("SELECT clock_timestamp()").fetchone()[0]  # type: ignore[index]
        stolen = wait_until(
            lambda: in_schema(
                db,
                schema,
                "SELECT started_at, runner_id FROM {s}.cron_executions"
                " WHERE job_name='victim' AND attempt=2 AND status='SUCCESS'",
            ),
            20,
            "the victim's lease to be stolen",
        )[0]
        assert stolen[1] != holder
        # The protocol's promise: stale_timeout (4 s, a wait by design) + one tick (0.5 s); the
        # 1.5 s beyond guards against an order-of-magnitude regression, not a performance claim.
        assert stolen[0] - killed_at <= timedelta(seconds=6), stolen[0] - killed_at
        group.members.pop(holder).kill()

        # Operator commands through the pooler, while the replicas run.
        trigger = ["trigger", "fast", "--scope", "shard:0"]  # fast runs for shards
        for args in (["pause", "fast"], ["resume", "fast"], trigger):
            done = _cli(pooled_dsn, schema, *args)
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        status = _cli(pooled_dsn, schema, "status", "--json")
        assert status.returncode == 0 and '"fast"' in status.stdout, status.stderr
        manual = wait_until(
            lambda: in_schema(
                db,
                schema,
                "SELECT count(*) FROM {s}.cron_executions WHERE trigger='manual'"
                " AND status='SUCCESS'",
            )[0][0],
            20,
            "the manual run to succeed",
        )
        assert manual == 1
        seen = _fast_plans(db, schema)
        wait_until(
            lambda: _fast_plans(db, schema) >= seen + 3, 30, "plans to go on through the pooler"
        )
        codes = group.terminate_all()
        assert set(codes.values()) == {0}, {rid: group.output(rid)[-2000:] for rid in codes}
    finally:
        for rid, replica in group.members.items():
            replica.kill()
            print(f"--- {rid}\n{group.output(rid)[-4000:]}")  # shown when the test fails

    duplicates = in_schema(
        db,
        schema,
        "SELECT job, scope_id, plan_time, count(*) FROM {s}.ledger WHERE attempt = 1"
        " GROUP BY 1, 2, 3 HAVING count(*) > 1",
    )
    assert duplicates == []
    running = in_schema(
        db, schema, "SELECT count(*) FROM {s}.cron_executions WHERE status='RUNNING'"
    )
    assert running[0][0] == 0
    assert _fast_plans(db, schema) >= 5
