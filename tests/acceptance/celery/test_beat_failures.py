"""What a pgsched beat refuses, what it does not do when built for introspection, and a
publish that fails (its broker stopped) retried without a duplicate once the broker is back."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from celery import Celery
from psycopg import sql

from pgsched.celery import BeatScheduler
from tests.acceptance.celery.conftest import CeleryRig
from tests.support.net import free_port
from tests.support.waiting import wait_until

Conn = psycopg.Connection[Any]


def _schema_exists(db: Conn, schema: str) -> bool:
    query = "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s"
    return db.execute(query, (schema,)).fetchone() is not None


def _beat_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "pgsched-beat"]


def test_a_solar_entry_is_refused_with_one_line_naming_it(db: Conn, redis_rig: CeleryRig) -> None:
    rig = redis_rig
    schedule = {"sunrise": {"solar": ["sunrise", 52.5, 13.4]}, "ok": {"every": 5}}
    beat = rig.beat("beat", schedule)
    assert beat.wait() != 0
    out = beat.output()
    line = (
        "celery beat -S pgsched: beat_schedule entry 'sunrise': a solar schedule is not"
        " supported by pgsched (use crontab(...), a timedelta or a number of seconds)"
    )
    # Celery's beat logs what reaches its redirected stderr: one line, with its log prefix.
    naming = [text for text in out.splitlines() if "sunrise" in text]
    assert len(naming) == 1 and naming[0].endswith(line), out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert not _schema_exists(db, rig.schema)  # nothing migrated, nothing written


def test_overlap_forbid_without_tracking_is_refused_naming_the_entry_and_setting(
    db: Conn, redis_rig: CeleryRig
) -> None:
    rig = redis_rig
    schedule = {"sync": {"every": 5, "pgsched": {"overlap": "forbid"}}, "ok": {"every": 5}}
    beat = rig.beat("beat", schedule)  # no CELERY_TEST_TRACK: no beat_pgsched_track
    assert beat.wait() != 0
    out = beat.output()
    naming = [text for text in out.splitlines() if "'sync'" in text]
    assert len(naming) == 1, out[-3000:]
    assert (
        "celery beat -S pgsched: beat_schedule entry 'sync': pgsched overlap='forbid'"
        in (naming[0])
    )
    assert naming[0].endswith("set beat_pgsched_track = True"), naming
    assert "Traceback" not in out, out[-3000:]
    assert not _schema_exists(db, rig.schema)


def _app(pg_dsn: str, schema: str, broker: str) -> Celery:
    app = Celery("lazy", broker=broker)
    app.conf.update(
        beat_pgsched_dsn=pg_dsn,
        beat_pgsched_schema=schema,
        beat_pgsched_migrate=True,
        task_default_queue=f"{schema}-q",
        beat_schedule={"hourly": {"task": "proj.hourly", "schedule": 3600}},
    )
    return app


def test_lazy_construction_writes_nothing_and_starts_nothing(
    db: Conn, schema: str, pg_dsn: str, redis_rig: CeleryRig
) -> None:
    app = _app(pg_dsn, schema, redis_rig.broker)
    before = set(threading.enumerate())
    for _ in range(2):  # as celery beat's banner and its remote control build it
        lazy = BeatScheduler(app=app, schedule_filename="unused", max_interval=5, lazy=True)
        assert "pgsched -> schema" in lazy.info
        assert lazy.tick() > 0  # nothing to check: no replica
        lazy.close()
        assert lazy.pgsched is None
    # Nothing started (a sync handler's idle thread of an earlier test may have ended).
    assert set(threading.enumerate()) - before == set()
    assert not _schema_exists(db, schema)
    # Built for real, the same class migrates and runs its replica (so the checks above can
    # fail), and close() stops it.
    real = BeatScheduler(app=app, schedule_filename="unused", max_interval=5, lazy=False)
    try:
        assert _schema_exists(db, schema)
        assert len(_beat_threads()) == 1
        assert real.pgsched is not None and "celery:hourly" in real.pgsched.jobs
    finally:
        real.close()
    assert _beat_threads() == []


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A Redis of the test's own on a free loopback port, to stop and start again."""
    port = free_port()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--appendonly", "no", "--dir", str(tmp_path)]
    state: dict[str, Any] = {"port": port}

    def start() -> None:
        log = (tmp_path / "redis.log").open("ab")
        state["proc"] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: b"Ready to accept" in (tmp_path / "redis.log").read_bytes(), 20, "redis")

    def stop() -> None:
        state["proc"].terminate()
        state["proc"].wait(20)

    state["start"], state["stop"] = start, stop
    start()
    try:
        yield state
    finally:
        if state["proc"].poll() is None:
            state["proc"].kill()
            state["proc"].wait(10)


def test_a_failed_publish_is_retried_without_a_duplicate(
    db: Conn, redis_rig: CeleryRig, private_redis: dict[str, Any]
) -> None:
    rig = redis_rig
    rig.broker = f"redis://127.0.0.1:{private_redis['port']}/0"
    rig.migrate()
    rig.worker()
    beat = rig.beat("beat", {"tick": {"every": 2}})
    rig.wait_started(beat)
    wait_until(lambda: beat.check_alive() and rig.records(), 40, "a first task sent")
    private_redis["stop"]()
    failed = sql.SQL(
        "SELECT id FROM {}.cron_executions WHERE job_name = 'celery:tick'"
        " AND status = 'FAILED' AND next_retry_at IS NOT NULL ORDER BY plan_time LIMIT 1"
    ).format(sql.Identifier(rig.schema))
    row = wait_until(lambda: db.execute(failed).fetchone(), 30, "a publish failed, to retry")
    private_redis["start"]()
    execution = str(row[0])
    status = sql.SQL("SELECT status, attempt FROM {}.cron_executions WHERE id = %s").format(
        sql.Identifier(rig.schema)
    )
    wait_until(
        lambda: db.execute(status, (row[0],)).fetchone() in {("SUCCESS", 2), ("SUCCESS", 3)},
        30,
        lambda: f"the retried publish to succeed: {db.execute(status, (row[0],)).fetchone()}",
    )
    wait_until(
        lambda: any(r["task_id"] == execution for r in rig.records()),
        40,
        "the worker to run the retried task",
    )
    assert beat.stop() == 0, beat.output()[-3000:]
    ids = [r["task_id"] for r in rig.records()]
    assert ids.count(execution) == 1
    assert len(ids) == len(set(ids)), ids
