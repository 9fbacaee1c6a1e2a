"""Prometheus metrics of one replica (README, "HTTP and metrics"). Scope ids never become labels."""

from __future__ import annotations

import contextlib
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .._records import Server
from .gauges import ClusterGauges

_RUN_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600)
_LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300)
_TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)


class Metrics:
    """The runtime's event sink. Counters count what this replica did; the gauges
    ``pgsched_running_stale``, ``pgsched_failed_runs`` and
    ``pgsched_last_success_timestamp_seconds`` describe the whole cluster: a collector
    (``_gauges``) reads them from the database when the registry is scraped.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._children: dict[tuple[object, ...], Any] = {}
        r = self.registry
        counter, gauge = self._counter, self._gauge
        self.runs = counter("pgsched_runs", "Executions finished by this replica.", "status")
        self.claims_counter = counter(
            "pgsched_claims", "Claims by outcome (won, stole, retry, conflict).", "outcome"
        )
        self.plans_skipped_counter = counter(
            "pgsched_plans_skipped",
            "Plans left unstarted, by reason (superseded, max_lateness, paused, outside_window).",
            "reason",
        )
        self.leases_lost = counter("pgsched_leases_lost", "Leases this replica lost while running.")
        self.loop_blocked_counter = counter(
            "pgsched_event_loop_blocked",
            "Times an async handler held the replica's event loop for more than a second.",
        )
        self.claim_lock_busy_counter = counter(
            "pgsched_claim_lock_busy",
            "Ticks that skipped a max_running job: another replica held its claim lock.",
        )
        self.cluster = ClusterGauges(r)
        self.job_interval = gauge(
            "pgsched_job_interval_seconds",
            "The job's nominal time between plans (for no-success alerts).",
        )
        self.run_duration = Histogram(
            "pgsched_run_duration_seconds",
            "Handler run time.",
            ["job"],
            buckets=_RUN_BUCKETS,
            registry=r,
        )
        self.start_lag = Histogram(
            "pgsched_start_lag_seconds",
            "Handler start minus the plan's due time (first attempts of scheduled plans).",
            ["job"],
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        self.tick_duration = Histogram(
            "pgsched_tick_duration_seconds",
            "Duration of one tick (probe and claims).",
            buckets=_TICK_BUCKETS,
            registry=r,
        )

        self.database_changes = Counter(
            "pgsched_database_changes",
            "Times this replica switched to another database server (a failover or switchover).",
            registry=r,
        )
        self.database_info = Gauge(
            "pgsched_database_info",
            "The database server this replica writes to (1), by system identifier and timeline.",
            ["system_identifier", "timeline"],
            registry=r,
        )

    def _counter(self, name: str, doc: str, *labels: str) -> Counter:
        return Counter(name, doc, ["job", *labels], registry=self.registry)

    def _gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, ["job"], registry=self.registry)

    # -- the runtime's events -----------------------------------------------------------

    def _child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, memoised: it is called for every execution."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def claims(self, job: str, outcome: str, count: int) -> None:
        self._child(self.claims_counter, job, outcome).inc(count)

    def plans_skipped(self, job: str, reason: str, count: int) -> None:
        self.plans_skipped_counter.labels(job, reason).inc(count)

    def claim_lock_busy(self, job: str) -> None:
        self.claim_lock_busy_counter.labels(job).inc()

    def loop_blocked(self, job: str) -> None:
        self.loop_blocked_counter.labels(job).inc()

    def lease_lost(self, job: str) -> None:
        self.leases_lost.labels(job).inc()

    def runs_finished(self, job: str, status: str, count: int) -> None:
        self._child(self.runs, job, "success" if status == "SUCCESS" else "failed").inc(count)

    def run_duration_of(self, job: str, seconds: float) -> None:
        self._child(self.run_duration, job).observe(seconds)

    def tick(self, seconds: float) -> None:
        self.tick_duration.observe(seconds)

    def started_late(self, job: str, seconds: float) -> None:
        self._child(self.start_lag, job).observe(max(0.0, seconds))

    def declare(self, job: str, interval: timedelta | None) -> None:
        """Export zero-valued series for ``job`` (so rates and alerts see it from the start)
        and its nominal interval."""
        for status in ("success", "failed"):
            self.runs.labels(job, status)
        for outcome in ("won", "stole", "retry", "conflict"):
            self.claims_counter.labels(job, outcome)
        self.leases_lost.labels(job)
        if interval is not None:
            self.job_interval.labels(job).set(interval.total_seconds())

    def database_server(self, previous: Server | None, server: Server) -> None:
        """The replica now writes to ``server`` (after ``previous``, a change, when given)."""
        if previous is not None:
            self.database_changes.inc()
            with contextlib.suppress(KeyError):
                self.database_info.remove(previous.system_identifier, str(previous.timeline))
        self.database_info.labels(server.system_identifier, str(server.timeline)).set(1)
