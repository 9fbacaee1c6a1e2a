"""What a replica did, recorded once: every event of the engine goes through :class:`Recorder`,
which counts it in the :class:`TickReport`, the Prometheus metrics and the structured log.
Owns no I/O beyond logging; never decides anything.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

from .._records import Server
from .._structures import TickReport
from .._telemetry.logs import bound_logger
from .._telemetry.metrics import Metrics
from .values import Claim, Claimed, Lease, Outcome

_REPORT_FIELD = {"won": "claimed", "stole": "stolen", "retry": "retried"}
# A batch's finish line names at most this many of its failed runs.
FAILED_NAMED = 20
Landed = Sequence[tuple[Lease, Outcome, datetime | None]]


class Listener(Protocol):
    """What hears of landed outcomes and closed stale leases (the failure hooks)."""

    def landed(self, landed: Landed) -> None: ...

    def stale_closed(self, job_name: str, row: dict[str, Any]) -> None: ...


class Recorder:
    """The engine's one event sink: report counters, metrics and log lines."""

    def __init__(self, metrics: Metrics, runner_id: str) -> None:
        self.report = TickReport()
        self.metrics = metrics
        self.log = bound_logger(runner_id=runner_id)
        # Whether the per-run events (claimed, run_succeeded) are logged at all: a run's
        # logger is bound only when it is used, and at level warning most runs never use it.
        self._per_run = self.log.is_enabled_for(logging.INFO)
        # The failure hooks, when the scheduler or a job has any (None: nothing to call).
        self.listener: Listener | None = None

    # -- claims -----------------------------------------------------------------------------

    def claimed(self, job: str, started: Sequence[tuple[Lease, Claim]]) -> None:
        """The leases of one claim transaction, started: counted once per kind (a metric
        update per run costs as much as the rest of recording it), logged per run."""
        for kind, count in Counter(claim.kind for _, claim in started).items():
            counter = _REPORT_FIELD[kind]
            setattr(self.report, counter, getattr(self.report, counter) + count)
            self.metrics.claims(job, kind, count)
        if not self._per_run:
            return
        batches: dict[int, list[tuple[Lease, Claim]]] = {}
        for lease, claim in started:
            if lease.slot is not None:  # a batch's: one line for all its runs
                batches.setdefault(id(lease.slot), []).append((lease, claim))
                continue
            run = lease.run
            stole = claim.kind == "stole"
            extra = {"previous_runner": claim.previous_runner} if stole else {}
            run.log.info(
                "claimed",
                outcome=claim.kind,
                trigger=run.trigger,
                fencing_token=run.fencing_token,
                **extra,
            )
        for batch in batches.values():
            plans = [lease.run.plan_time for lease, _ in batch]
            self.log.info(
                "batch_claimed",
                job=job,
                runs=len(batch),
                first_plan=iso(min(plans)),
                last_plan=iso(max(plans)),
                kinds=dict(Counter(claim.kind for _, claim in batch)),
            )

    def committed(self, job: str, claimed: Claimed) -> None:
        """A claim of ``job`` committed ``claimed``: the stale leases it closed, the plans it
        passed over or lost to another claim (counted only now: a claim rolled back is
        decided again)."""
        for row in claimed.closed:
            self.stale_closed(job, row)
        for reason, plans in claimed.skipped.items():
            self.skipped(job, reason, plans)
        if claimed.conflicts:
            self.conflicts(job, claimed.conflicts)

    def conflicts(self, job: str, count: int) -> None:
        self.report.conflicts += count
        self.metrics.claims(job, "conflict", count)

    def lock_busy(self, job: str) -> None:
        """A ``max_running`` job was skipped this tick: another replica held its claim lock."""
        self.report.lock_busy += 1
        self.metrics.claim_lock_busy(job)

    def claim_blocked(self, job: str, waited_s: float) -> None:
        """``job``'s claim waited ``waited_s`` for rows another replica's unfinished claim
        holds, and was given up for this tick."""
        self.log.warning("claim_blocked", job=job, waited_s=waited_s)

    def skipped(self, job: str, reason: str, count: int) -> None:
        self.report.skipped += count
        self.metrics.plans_skipped(job, reason, count)

    def stale_closed(self, job: str, row: dict[str, Any]) -> None:
        self.report.closed_stale += 1
        self.log.warning(
            "stale_closed",
            job=job,
            scope=f"{row['scope_kind']}:{row['scope_id']}",
            plan_time=iso(row["plan_time"]),
            attempt=row["attempt"],
            execution_id=str(row["id"]),
            previous_runner=row["runner_id"],
        )
        if self.listener is not None:
            self.listener.stale_closed(job, row)

    # -- executions -------------------------------------------------------------------------

    def started(self, lease: Lease, lag_s: float) -> None:
        """A first attempt of a scheduled plan started ``lag_s`` after it fell due."""
        self.metrics.started_late(lease.job.name, lag_s)

    def handler_raised(self, leases: Sequence[Lease], error: str, exc: BaseException) -> None:
        """The handler of one run, or of a batch of ``leases`` (said once), raised."""
        head = leases[0]
        if head.slot is None:
            head.run.log.warning("handler_raised", error=error, exc_info=exc)
        else:
            self.log.warning(
                "handler_raised", job=head.job.name, runs=len(leases), error=error, exc_info=exc
            )

    def loop_blocked(self, lease: Lease, seconds: float) -> None:
        """An async handler held the event loop for ``seconds``: every other job, the
        heartbeats and HTTP stalled meanwhile."""
        self.metrics.loop_blocked(lease.job.name)
        lease.run.log.warning(
            "event_loop_blocked",
            blocked_s=round(seconds, 3),
            hint="an async handler must not block: await, or make it a def (run in a thread)",
        )

    def loop_stalled(
        self, lease: Lease, seconds: float, core_wait: float, collector: float
    ) -> None:
        """A step of an async handler held the loop ``seconds + core_wait + collector`` but
        its thread waited ``core_wait`` of it for a core and the garbage collector ran
        ``collector`` of it: the machine's load and the process's heap, not the handler."""
        lease.run.log.info(
            "event_loop_stalled",
            step_s=round(seconds, 3),
            core_wait_s=round(core_wait, 3),
            collector_s=round(collector, 3),
        )

    def lease_lost(self, lease: Lease, why: str) -> None:
        self.report.leases_lost += 1
        self.metrics.lease_lost(lease.job.name)
        lease.run.log.warning("lease_lost", reason=why)

    def finished(self, landed: Landed) -> None:
        """The outcomes of these leases were written (their leases held), each with its next
        retry: counted once per job and status (as claims are), logged and timed per run."""
        counts: Counter[tuple[str, str]] = Counter()
        batches: dict[int, list[tuple[Lease, Outcome, datetime | None]]] = {}
        for lease, outcome, next_retry_at in landed:
            counts[lease.job.name, outcome.status] += 1
            self.metrics.run_duration_of(lease.job.name, outcome.duration_ms / 1000)
            if lease.slot is not None:  # a batch's: one line for all its runs
                batches.setdefault(id(lease.slot), []).append((lease, outcome, next_retry_at))
            elif outcome.status == "SUCCESS":
                if self._per_run:
                    lease.run.log.info(
                        "run_succeeded",
                        duration_ms=outcome.duration_ms,
                        rows_affected=outcome.rows_affected,
                    )
            else:
                lease.run.log.warning(
                    "run_failed",
                    error_code=outcome.error_code,
                    error=outcome.error_msg,
                    duration_ms=outcome.duration_ms,
                    next_retry_at=None if next_retry_at is None else iso(next_retry_at),
                )
        for batch in batches.values():
            self._batch_finished(batch)
        for (job, status), count in counts.items():
            if status == "SUCCESS":
                self.report.succeeded += count
            else:
                self.report.failed += count
            self.metrics.runs_finished(job, status, count)
        if self.listener is not None:
            self.listener.landed(landed)

    def _batch_finished(self, batch: Landed) -> None:
        """One line for the runs of a batch written together: counts, and the failed runs
        named (the first ``FAILED_NAMED``; every one is in the ledger)."""
        failed = [
            (lease, outcome, at) for lease, outcome, at in batch if outcome.status != "SUCCESS"
        ]
        fields: dict[str, Any] = {
            "job": batch[0][0].job.name,
            "runs": len(batch),
            "succeeded": len(batch) - len(failed),
            "failed": len(failed),
            "duration_ms": max(outcome.duration_ms for _, outcome, _ in batch),
        }
        if not failed:
            if self._per_run:
                self.log.info("batch_finished", **fields)
            return
        fields["failed_runs"] = [
            {
                "scope": str(lease.run.scope),
                "plan_time": iso(lease.run.plan_time),
                "execution_id": str(lease.execution_id),
                "error_code": outcome.error_code,
                "error": outcome.error_msg,
                "next_retry_at": None if at is None else iso(at),
            }
            for lease, outcome, at in failed[:FAILED_NAMED]
        ]
        self.log.warning("batch_finished", **fields)

    def unstorable(self, lease: Lease, error: str) -> None:
        lease.run.log.error("outcome_unstorable", error=error)

    # -- the engine -------------------------------------------------------------------------

    def tick(self, seconds: float) -> None:
        self.metrics.tick(seconds)

    def database_server(self, previous: Server | None, server: Server) -> None:
        """The replica writes to ``server`` from now on: the first it met, or (after
        ``previous``) another one, a failover or switchover, said once."""
        self.metrics.database_server(previous, server)
        if previous is None:
            self.log.info("database_server", server=server.describe())
        else:
            self.log.warning(
                "database_changed", previous=previous.describe(), server=server.describe()
            )

    def error(self, event: str, **fields: Any) -> None:
        """A tick (or one job's part of it) failed; the engine carries on."""
        self.report.errors += 1
        self.log.error(event, **fields)


def iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()
