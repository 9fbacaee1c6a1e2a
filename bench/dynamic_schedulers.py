"""The contenders of the schedules-as-data workloads (g, h, i): one class each behind
:class:`DynamicContender`, listed in :data:`bench.registry.DYNAMIC`.

A code-defined job's contender (:mod:`bench.schedulers`) is told its scopes and cadence in
its configuration; here the schedules are data that a driver process puts, replaces and
deletes through the contender's own API while its replicas run (see
:mod:`bench.peers.dynamic`). So a contender also knows its driver, how many processes make
one cluster of it, how soon its replicas see a put, how large it can be made to run, and
where its claim of a plan is recorded. Standard library only at import: the chart reads the
labels from the peers' virtualenv.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any, Protocol

from bench.peers.common import LEDGER_TABLE
from bench.shared import line, peer_setup
from bench.workloads import Workload


class DynamicContender(Protocol):
    key: str  # in --schedulers and the results JSON
    label: str
    style: Mapping[str, Any]
    third_party: bool
    settle_s: float  # how long after a put until every replica acts on it
    note: str  # how it was run, for the report

    def unsupported(self, wl: Workload) -> str | None:
        """Why it cannot run ``wl`` at all, or None."""
        ...

    def size(self, wl: Workload) -> tuple[Workload, str]:
        """``wl`` as it runs it (fewer schedules, and a churn as many times slower, where it
        cannot run the full size on the benchmark's machine), and why, if it is smaller."""
        ...

    def processes(self, replicas: int) -> int:
        """How many processes make one cluster of it, given ``--replicas``."""
        ...

    def setup(self, dsn: str, python: str, env: Mapping[str, str]) -> None: ...

    def command(self, python: str, dsn: str) -> list[str]:
        """One replica's command line (``BENCH_CONFIG`` says which replica it is)."""
        ...

    def driver(self, python: str) -> list[str]:
        """The driver's command line, before ``put ...`` / ``churn ...``."""
        ...

    def claims_sql(self) -> str:
        """``(scope, plan_time, claimed_at)`` of every execution it claimed: when it decided
        to run the plan, from its own tables (or the ledger, where it says)."""
        ...

    def extra_stats(self, counters: list[dict[str, Any]]) -> dict[str, Any]: ...


class _Dynamic:
    key = ""
    label = ""
    style: Mapping[str, Any] = MappingProxyType({})
    third_party = True
    settle_s = 3.0
    note = ""
    module = ""  # bench.peers.<module>: the replica, `setup` and `drive`
    # Per kind of workload (Workload.schedules): the most schedules it still runs on the
    # benchmark's machine, and why not more.
    max_schedules: Mapping[str, int] = MappingProxyType({})
    why_fewer: Mapping[str, str] = MappingProxyType({})

    def unsupported(self, wl: Workload) -> str | None:
        return None

    def size(self, wl: Workload) -> tuple[Workload, str]:
        most = self.max_schedules.get(wl.schedules)
        if most is None or wl.scopes <= most:
            return wl, ""
        note = f"{most:,} of {wl.scopes:,} schedules: {self.why_fewer[wl.schedules]}"
        churn = wl.churn_per_s * most // wl.scopes
        if wl.churn_per_s:
            note += f"; churn scaled to {churn:,}/s (the same share of the schedules)"
        return replace(wl, scopes=most, churn_per_s=churn), note

    def processes(self, replicas: int) -> int:
        return replicas

    def setup(self, dsn: str, python: str, env: Mapping[str, str]) -> None:
        peer_setup(self.module, python, env, timeout_s=180)

    def command(self, python: str, dsn: str) -> list[str]:
        return [python, "-m", f"bench.peers.{self.module}"]

    def driver(self, python: str) -> list[str]:
        return [python, "-m", f"bench.peers.{self.module}", "drive"]

    def claims_sql(self) -> str:
        return f"SELECT scope, plan_time, coalesce(claimed_at, started_at) FROM {LEDGER_TABLE}"

    def extra_stats(self, counters: list[dict[str, Any]]) -> dict[str, Any]:
        return {}


class PgschedDynamic(_Dynamic):
    """This repository's working tree: one ``dynamic=True`` job, schedules put through
    ``pgsched.Admin`` (``put_schedules`` / ``delete_schedule``)."""

    key = "pgsched"
    label = "pgsched"
    style = line(color="tab:blue", linewidth=2.5, marker="o")
    third_party = False
    settle_s = 2.0
    note = "one dynamic job; Admin.put_schedules per batch, Admin.delete_schedule per delete"

    def setup(self, dsn: str, python: str, env: Mapping[str, str]) -> None:
        import pgsched

        pgsched.Admin(dsn=dsn).migrate()

    def command(self, python: str, dsn: str) -> list[str]:
        app = "bench.peers.pgsched_dynamic_app"
        return [python, "-m", "pgsched", "--dsn", dsn, "run", app, "--no-http"]

    def driver(self, python: str) -> list[str]:
        return [python, "-m", "bench.peers.pgsched_driver"]

    def claims_sql(self) -> str:
        return (
            "SELECT scope_id, plan_time, created_at FROM pgsched.cron_executions "
            "WHERE job_name = 'bench'"
        )


class Dbos(_Dynamic):
    key = "dbos"
    label = "DBOS 3.4.0"
    style = line(color="tab:purple", marker="X")
    module = "dbos_peer"
    settle_s = 12.0  # its scheduler lists the schedules every 5 s (bench.peers.dbos_peer)
    note = (
        "one schedule per scope (DBOSClient.apply_schedules per batch, delete_schedule per "
        "delete); each replica polls the schedules every 5 s and runs one thread per schedule"
    )
    max_schedules = MappingProxyType({"bulk": 10_000, "due": 1_000, "churn": 1_000})
    why_fewer = MappingProxyType(
        {
            "bulk": "every replica runs one thread per schedule",
            "due": "at 10,000 its 3 x 10,000 threads (load average 1,000) completed no plan",
            "churn": "every replica runs one thread per schedule (see h)",
        }
    )

    def claims_sql(self) -> str:
        """The enqueue of ``sched-<scope>-<fire time>`` is DBOS's claim of the plan."""
        return (
            "SELECT split_part(workflow_uuid, '-', 2), "
            "substr(workflow_uuid, length(split_part(workflow_uuid, '-', 2)) + 8)::timestamptz, "
            "to_timestamp(created_at / 1000.0) FROM dbos.workflow_status "
            "WHERE workflow_uuid LIKE 'sched-%'"
        )


class CeleryBeat(_Dynamic):
    key = "celery_beat"
    label = "django-celery-beat 2.9.0"
    style = line(color="tab:brown", marker="*")
    module = "celery_peer"
    settle_s = 4.0  # beat checks for changes every second (beat_max_loop_interval)
    note = (
        "one PeriodicTask with a CrontabSchedule per scope (bulk_create per batch); one celery "
        "beat (a second one would fire everything twice) and one worker (8 threads) on Redis"
    )
    max_schedules = MappingProxyType({"bulk": 1_000, "due": 2_000, "churn": 2_000})
    why_fewer = MappingProxyType(
        {
            "bulk": "at 10,000 and 100,000 its beat spent the whole window in its first load "
            "of the schedules (one SELECT mapping each crontab's hour to the server's zone) "
            "and never ticked",
            "due": "at 10,000 its one beat sent 6% of the plans (59 s p99 lag)",
            "churn": "its one beat sends a few hundred tasks a second at most (see h)",
        }
    )

    def processes(self, replicas: int) -> int:
        return 2  # replica 0 is the beat, replica 1 the worker

    def claims_sql(self) -> str:
        """The beat's send of the task is its claim (the worker records it)."""
        return f"SELECT scope, plan_time, claimed_at FROM {LEDGER_TABLE}"
