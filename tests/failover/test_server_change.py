"""A replica that meets another server: a failover to an asynchronous standby that lacked the
last commits, and an old primary that comes back writable beside the promoted one.

- The change is adopted once, logged and counted (``pgsched_database_changes_total``,
  ``pgsched_database_info`` with the new timeline).
- What the replica wrote to the old primary and the new one lacks is put back before it
  claims anything there: no plan it finished is run again, none is left RUNNING.
- Fencing tokens handed out by the promoted server are larger than every token of the old
  one, though its sequence went back with the lost transactions.
- A writable server on an older timeline (the demoted primary, restarted as it was) is never
  written to: its connections are refused and new ones steered past it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import psycopg
import pytest

import pgsched
from tests.support.postgres import REPLICATION, PrivateServer
from tests.support.threads import serving
from tests.support.waiting import wait_until

pytestmark = pytest.mark.failover

SCHEMA = "changes"
SCOPES = [pgsched.Scope("shard", str(i)) for i in range(3)]


@pytest.fixture
def servers() -> Iterator[ExitStack]:
    """The servers a test makes, removed together at its end."""
    with ExitStack() as stack:
        yield stack


def _migrated_pair(servers: ExitStack) -> tuple[PrivateServer, PrivateServer]:
    """A primary with pgsched's schema, and a hot standby of it."""
    old = servers.enter_context(PrivateServer.create(REPLICATION, system_first=True))
    new = servers.enter_context(old.standby())
    with pgsched.Admin(old.dsn(), schema=SCHEMA) as admin:
        admin.migrate()
    return old, new


def _dsn(*nodes: PrivateServer) -> str:
    ports = ",".join(str(n.port) for n in nodes)
    hosts = ",".join("127.0.0.1" for _ in nodes)
    return (
        f"host={hosts} port={ports} dbname=postgres user=postgres target_session_attrs=read-write"
    )


def _replica(dsn: str, runs: list[pgsched.Run]) -> pgsched.Scheduler:
    s = pgsched.Scheduler(
        dsn=dsn, schema=SCHEMA, runner_id="changer", tick_interval="0.2s", max_concurrency=6
    )

    @s.job(
        every="1s",
        scopes=SCOPES,
        catch_up="every_plan",
        max_plans_per_tick=5,
        run_timeout="5s",
        stale_timeout="8s",
        heartbeat_interval="1s",
    )
    def work(run: pgsched.Run) -> None:
        runs.append(run)

    return s


def _rows(node: PrivateServer, where: str = "true", params: Any = None) -> list[tuple[Any, ...]]:
    return node.sql(
        f"SELECT id, scope_id, plan_time, status, fencing_token FROM {SCHEMA}.cron_executions "
        f"WHERE {where}",
        params,
    )


def _changes(s: pgsched.Scheduler) -> float:
    return s.metrics.registry.get_sample_value("pgsched_database_changes_total") or 0.0


def _timeline_exported(s: pgsched.Scheduler, timeline: int) -> bool:
    for metric in s.metrics.registry.collect():
        if metric.name == "pgsched_database_info":
            return any(
                x.labels.get("timeline") == str(timeline) and x.value == 1 for x in metric.samples
            )
    return False


def test_a_failover_that_lost_commits_puts_finished_work_back_and_tokens_stay_larger(
    servers: ExitStack,
) -> None:
    old, new = _migrated_pair(servers)
    wait_until(
        lambda: new.sql(f"SELECT to_regclass('{SCHEMA}.cron_executions')")[0][0],
        15,
        "the schema to reach the standby",
    )
    new.stop("fast")  # the standby falls behind: nothing the replica writes reaches it
    runs: list[pgsched.Run] = []
    s = _replica(_dsn(old, new), runs)
    with serving(s):
        wait_until(lambda: len(_rows(old, "status = 'SUCCESS'")) >= 6, 20, "work on old")
        old.stop("immediate")  # a crash: its last commits never left it
        new.start()
        new.promote()
        wait_until(lambda: _changes(s) == 1, 20, "the replica to switch servers")
        assert _timeline_exported(s, 2)
        finished_before = {(r.scope.id, r.plan_time) for r in list(runs)}
        wait_until(
            lambda: len(_rows(new, "status = 'SUCCESS'")) >= len(finished_before) + 6,
            20,
            "work on the promoted server",
        )
    rows = _rows(new)
    by_plan: dict[tuple[str, Any], int] = {}
    for run in runs:
        key = (run.scope.id, run.plan_time)
        by_plan[key] = by_plan.get(key, 0) + 1
    assert [k for k, n in by_plan.items() if n > 1] == [], "a finished plan ran again"
    stored = {(r[1], r[2]) for r in rows if r[3] == "SUCCESS"}
    assert finished_before <= stored, "work finished on the old primary was not put back"
    assert [r for r in rows if r[3] == "RUNNING"] == []
    old_tokens = [r.fencing_token for r in runs if (r.scope.id, r.plan_time) in finished_before]
    new_tokens = [r.fencing_token for r in runs if (r.scope.id, r.plan_time) not in finished_before]
    assert new_tokens and min(new_tokens) > max(old_tokens), (old_tokens, new_tokens)


def test_an_old_primary_back_beside_the_promoted_one_is_never_written_to(
    servers: ExitStack,
) -> None:
    old, new = _migrated_pair(servers)
    runs: list[pgsched.Run] = []
    s = _replica(_dsn(old, new), runs)
    with serving(s):
        wait_until(lambda: len(_rows(old, "status = 'SUCCESS'")) >= 3, 20, "work on old")
        old.stop("fast")  # a clean switchover: the standby has everything
        new.promote()
        wait_until(lambda: _changes(s) == 1, 20, "the replica to switch servers")
        old.start()  # the demoted primary, back as it was: writable, on the old timeline
        (restarted_at,) = old.sql("SELECT clock_timestamp()")[0]
        # Every connection of the replica is cut: the pool reconnects, and libpq meets the
        # old primary first in the DSN.
        new.sql(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name LIKE 'pgsched%%' AND pid <> pg_backend_pid()"
        )
        (cut_at,) = new.sql("SELECT clock_timestamp()")[0]
        wait_until(
            lambda: len(_rows(new, "status = 'SUCCESS' AND started_at > %s", (cut_at,))) >= 6,
            20,
            "work on the promoted server after the cut",
        )
    written = _rows(old, "updated_at > %s", (restarted_at,))
    assert written == [], f"{len(written)} rows written to the demoted primary"
    assert _changes(s) == 1  # the old primary was refused, not adopted
    with psycopg.connect(new.dsn(), autocommit=True) as conn:
        (running,) = conn.execute(
            f"SELECT count(*) FROM {SCHEMA}.cron_executions WHERE status = 'RUNNING'"
        ).fetchone() or (None,)
    assert running == 0
