"""/healthz and /readyz on migrated, unmigrated and half-migrated schemas, the status page with
hostile data, and the default bind address (loopback only)."""

from __future__ import annotations

import html
import socket
from pathlib import Path

import pytest

from pgsched._facades.http.html import SCRIPT
from tests.acceptance.http.cluster import (
    HOSTILE_ERROR,
    HOSTILE_JOB,
    HOSTILE_SCOPE,
    MAIN_JOBS,
    Cluster,
    migrate,
    seed_job,
    seed_run,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance


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
        lambda: nomig.check_alive() and nomig.events("tick_error"),
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
    migrate(cluster.dsn, cluster.unmigrated)
    wait_until(lambda: nomig.get("/readyz").status == 200, 10, "/readyz to turn 200")


def test_schema_missing_a_migration_is_not_ready(cluster: Cluster) -> None:
    """Only 0001 applied (pgsched upgraded, ``migrate`` not run yet): the replica cannot work
    (its ticks fail on the missing columns), so it is not "migrated" in the sense of ``/readyz``."""
    old = cluster.old
    wait_until(
        lambda: old.check_alive() and old.events("tick_error"),
        10,
        "a failed tick on the half-migrated schema",
    )
    assert old.get("/healthz").status == 200
    ready = old.get("/readyz")
    assert ready.status == 503, (ready.status, ready.text)
    assert ready.json()["ready"] is False


# -- 4. the status page --------------------------------------------------------------------


def test_status_page_lists_every_job_and_escapes_hostile_data(cluster: Cluster) -> None:
    seed_job(cluster, "ghost_page")
    seed_job(cluster, HOSTILE_JOB)
    seed_run(cluster, "ghost_page", "RUNNING", scope_id=HOSTILE_SCOPE, stale_in_s=-30)
    seed_run(cluster, HOSTILE_JOB, "FAILED", scope_id=HOSTILE_SCOPE, ago_s=20, finished_ago_s=5)
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
    # The page's one script is its own (named in the CSP by its hash), never the data's.
    assert page.lower().count("<script") == 1 and f"<script>{SCRIPT}</script>" in page
    assert HOSTILE_ERROR not in page and HOSTILE_JOB not in page and "<b>job" not in page


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
