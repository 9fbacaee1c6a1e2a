"""A pgsched beat whose database cannot be reached sends nothing and says so on /readyz (503),
whether the database is down when the beat starts or goes away while it runs; it sends again
as soon as the database answers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.celery.conftest import REDIS, CeleryRig, redis_db
from tests.support.net import Response, free_port, http
from tests.support.postgres import PrivateServer
from tests.support.waiting import holds_for, wait_until


@pytest.fixture
def server() -> Iterator[PrivateServer]:
    """A private PostgreSQL with pgsched's tables, stopped (the test starts it)."""
    with PrivateServer.create() as server:
        subprocess.run(
            [sys.executable, "-m", "pgsched", "--dsn", server.dsn(), "migrate"],
            check=True,
            capture_output=True,
            text=True,
        )
        server.stop()
        yield server


@pytest.fixture
def rig(tmp_path: Path, server: PrivateServer) -> Iterator[CeleryRig]:
    rig = CeleryRig(tmp_path, REDIS, "pgsched", server.dsn())
    rig.broker = f"{REDIS}/{redis_db(rig.queue)}"
    try:
        yield rig
    finally:
        rig.close()


def test_a_beat_without_its_database_sends_nothing_and_is_not_ready(
    rig: CeleryRig, server: PrivateServer
) -> None:
    rig.worker()
    port = free_port()
    extra = {"CELERY_TEST_HTTP_PORT": str(port), "CELERY_TEST_MIGRATE": "0"}
    beat = rig.beat("beat", {"tick": {"every": 1}}, **extra)

    def ready() -> Response | None:
        beat.check_alive()
        try:
            return http("GET", f"http://127.0.0.1:{port}/readyz", timeout=5)
        except OSError:
            return None

    wait_until(lambda: (r := ready()) is not None and r.status == 503, 40, "/readyz 503")
    holds_for(lambda: not rig.records(), 3, "nothing sent before the database answers")

    server.start()
    wait_until(lambda: len(rig.records()) >= 2, 40, "tasks sent once the database answers")
    wait_until(lambda: (r := ready()) is not None and r.status == 200, 30, "/readyz 200")

    server.stop()
    wait_until(lambda: (r := ready()) is not None and r.status == 503, 40, "/readyz 503 again")
    # A publish that was under way when the database went may still arrive: count after that.
    sent = len(rig.records())
    holds_for(lambda: len(rig.records()) == sent, 4, "nothing sent while the database is away")

    server.start()
    wait_until(lambda: len(rig.records()) >= sent + 2, 40, "tasks sent once it is back")
    assert beat.stop() == 0, beat.output()[-3000:]
    assert "Traceback" not in beat.output(), beat.output()[-3000:]
