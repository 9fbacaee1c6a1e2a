"""A pgsched beat operated as any pgsched replica: HTTP probes and metrics, a trigger that
publishes at once, a pause that stops sending; and a beat whose replica ended does not go on
sending nothing."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from celery import Celery
from celery.beat import Service

import pgsched
from pgsched.celery import BeatScheduler
from pgsched.celery.replica import ReplicaEnded
from tests.acceptance.celery.conftest import CeleryRig
from tests.support.net import free_port, http
from tests.support.waiting import holds_for, wait_until


def test_probes_metrics_trigger_and_pause(db: Any, redis_rig: CeleryRig) -> None:
    rig = redis_rig
    rig.migrate()
    rig.worker()
    port = free_port()
    # First sight as deployed ("next"): the hourly entry sends nothing until the next hour.
    extra = {"CELERY_TEST_HTTP_PORT": str(port), "PGSCHED_FIRST_SIGHT": "next"}
    beat = rig.beat("beat", {"hourly": {"every": 3600}}, **extra)
    rig.wait_started(beat)
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        beat.check_alive()
        try:
            return http("GET", f"{url}/healthz").status == 200
        except OSError:
            return False

    wait_until(healthy, 40, "the beat's /healthz")
    metrics = http("GET", f"{url}/metrics").text
    assert 'job="celery:hourly"' in metrics
    admin = pgsched.Admin(dsn=rig.dsn, schema=rig.schema)
    try:
        run = admin.trigger("celery:hourly")
        wait_until(
            lambda: any(r["task_id"] == str(run.id) for r in rig.records()),
            30,
            "the triggered run's task",
        )
        admin.pause("celery:hourly")
        admin.trigger("celery:hourly")  # a run-now of a paused job waits for its resume
        holds_for(
            lambda: all(r["task_id"] == str(run.id) for r in rig.records()),
            3,
            "nothing sent while paused",
        )
        admin.resume("celery:hourly")
        wait_until(lambda: len(rig.records()) >= 2, 30, "the run-now sent once resumed")
    finally:
        admin.close()
    assert beat.stop() == 0, beat.output()[-3000:]


@pytest.fixture
def app(pg_dsn: str, schema: str, redis_rig: CeleryRig) -> Celery:
    app = Celery("ended", broker=redis_rig.broker)
    app.conf.update(
        beat_pgsched_dsn=pg_dsn,
        beat_pgsched_schema=schema,
        beat_pgsched_migrate=True,
        task_default_queue=redis_rig.queue,
        beat_schedule={"hourly": {"task": "proj.hourly", "schedule": 3600}},
    )
    return app


def test_a_beat_whose_replica_ended_stops_with_an_error(app: Celery) -> None:
    service = Service(app, max_interval=1, scheduler_cls=BeatScheduler)
    scheduler = service.scheduler
    assert scheduler.pgsched is not None
    scheduler.pgsched.stop()  # as if its loop had ended on its own
    wait_until(
        lambda: not any(t.name == "pgsched-beat" for t in threading.enumerate()),
        30,
        "the replica's thread to end",
    )
    with pytest.raises(ReplicaEnded, match="pgsched replica of this beat ended"):
        service.start()  # Celery's beat loop: the first tick raises, the beat exits non-zero
