"""The replica's lease table: the executions it holds, the per-scope overlap chains, its free
handler slots, and losses (each counted once). Owns that in-memory state only: it runs no SQL
and no handler, and tells the engine through a callback when freed slots should be used.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import UTC
from typing import TYPE_CHECKING
from uuid import UUID

from .._jobs.spec import JobSpec
from .._run import Liveness, Run, watch
from .._structures import Scope
from .recorder import Recorder
from .values import BatchSlot, Claim, Lease

if TYPE_CHECKING:
    from structlog.typing import FilteringBoundLogger


class LeaseTable:
    """The leases of one replica, with at most ``max_concurrency`` held at once."""

    def __init__(
        self, max_concurrency: int, recorder: Recorder, on_slots_freed: Callable[[], None]
    ) -> None:
        self.max_concurrency = max_concurrency
        self._recorder = recorder
        self._leases: dict[UUID, Lease] = {}
        # overlap="forbid": the newest lease of each (job, scope); a newer one waits for it.
        self._tails: dict[tuple[str, Scope], Lease] = {}
        self._slots = 0  # taken: one per single run held, one per batch with a run held
        self._job_slots: Counter[str] = Counter()  # of them, each job's
        self._backlog = False
        self._on_slots_freed = on_slots_freed

    def __len__(self) -> int:
        return len(self._leases)

    def __bool__(self) -> bool:
        return bool(self._leases)

    def all(self) -> list[Lease]:
        return list(self._leases.values())

    @property
    def free(self) -> int:
        """Handler slots not taken: a batch takes one for all its runs."""
        return self.max_concurrency - self._slots

    def free_for(self, job: str, contenders: int) -> int:
        """The free slots ``job`` may take while ``contenders`` jobs (it among them) have
        due work: its fair share of all the slots, ``ceil(max_concurrency / contenders)``,
        less those it holds; alone, every free one. One job's backlog (a catch-up of many
        plans) then leaves the other jobs their share."""
        if contenders <= 1:
            return self.free
        share = -(-self.max_concurrency // contenders)
        return max(0, min(self.free, share - self._job_slots[job]))

    def hold(self, leases: list[Lease]) -> None:
        """Take one slot for ``leases``: a single run's, or a batch's (which share it, and
        claimed together, are renewed together). Under ``overlap="forbid"`` each is chained
        after the scope's previous lease held here, and starts when that one is done."""
        if leases[0].job.batch_size is not None:
            slot = BatchSlot(len(leases))
            for lease in leases:
                lease.slot = slot
        self._slots += 1
        self._job_slots[leases[0].job.name] += 1
        for lease in leases:
            self._leases[lease.execution_id] = lease
            if lease.job.overlap == "forbid":
                key = (lease.job.name, lease.run.scope)
                lease.chain_after(self._tails.get(key))
                self._tails[key] = lease

    def note_backlog(self) -> None:
        """Work was left unclaimed for want of slots (or blocked by overlap): claim again
        once enough slots are free rather than at the next tick."""
        self._backlog = True

    def release(self, lease: Lease) -> None:
        """Free ``lease``'s slot (its outcome is written, or it was lost); a batch's slot is
        free once its last lease is released."""
        if self._leases.pop(lease.execution_id, None) is not None:
            slot = lease.slot
            if slot is not None:
                slot.held -= 1
            if slot is None or slot.held == 0:
                self._slots -= 1
                self._job_slots[lease.job.name] -= 1
        key = (lease.job.name, lease.run.scope)
        if self._tails.get(key) is lease:
            del self._tails[key]
        lease.finish()
        if self._backlog and self._free_enough():
            self._backlog = False
            self._on_slots_freed()

    def lose(self, lease: Lease, why: str, *, release: bool = True) -> None:
        """The lease is gone (stolen, closed out): count and log it once, and free its slot
        unless ``release`` is False (a heartbeat found it lost while the handler still runs;
        the handler's outcome then releases it, writing nothing)."""
        if lease.liveness.mark_lost():
            self._recorder.lease_lost(lease, why)
        if release:
            self.release(lease)

    def _free_enough(self) -> bool:
        """A claim costs about the same for one row as for thousands, so a large replica
        waits for a quarter of its slots (or the next tick) rather than claiming a row per
        finished run."""
        return not self._leases or self.free >= max(1, self.max_concurrency // 4)

    def due_for_heartbeat(self, now: float) -> list[Lease]:
        return [lease for lease in self._leases.values() if lease.beat_due(now)]

    async def wait_idle(self) -> None:
        """Return when every lease is released."""
        while self._leases:
            await asyncio.gather(*(lease.wait_done() for lease in list(self._leases.values())))


def open_lease(
    job: JobSpec, claim: Claim, runner_id: str, log: FilteringBoundLogger, claimed_at: float
) -> Lease:
    """The lease (and the handler's :class:`Run`) of a claim just won at ``claimed_at``
    (monotonic; a batch's leases share it, so they are renewed together); ``log`` is the
    replica's logger (``run.log`` binds it to the run's fields when first used)."""
    plan_time = claim.plan_time.astimezone(UTC)
    run = Run(
        job=job.name,
        scope=claim.scope,
        plan_time=plan_time,
        attempt=claim.attempt,
        max_attempts=claim.max_attempts,
        execution_id=claim.execution_id,
        lease_token=claim.lease_token,
        fencing_token=claim.fencing_token,
        runner_id=runner_id,
        trigger=claim.trigger,
        payload=claim.payload or {},
        replica_log=log,
    )
    liveness = Liveness(job.stale_timeout.total_seconds())
    watch(run, liveness)
    lease = Lease(
        job,
        run,
        liveness,
        execution_id=claim.execution_id,
        kind=claim.kind,
        stolen=claim.stolen,
        started_at=claim.started_at,
        claimed_at=claimed_at,
    )
    if claim.kind == "won" and claim.trigger == "schedule" and claim.started_at is not None:
        # The claim's database time less the due time; the executor adds any local wait.
        lease.claim_lag = (claim.started_at - plan_time - job.schedule_delay).total_seconds()
    return lease
