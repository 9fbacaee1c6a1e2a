"""Registration of code-defined jobs: ``Scheduler.job`` (every option spelled out and typed),
``register``, ``unregister`` and ``upcoming``. Owns the registered jobs; runs nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, Never, TypeVar

from ._config import (
    FailureHook,
    FirstSight,
    Handler,
    JobSpec,
    Overlap,
    RecoveryHook,
    ScopesFn,
    build_job,
)
from ._errors import ConfigError, NotFoundError
from ._metrics import Metrics
from ._model import Scope
from ._planning.recurrence import CatchUp, DstRepeated, DstSkipped, Planner
from ._times import Duration, aware

_F = TypeVar("_F", bound=Handler)


class JobRegistry:
    """The jobs of one scheduler, by name (thread-safe: jobs may be added while it runs)."""

    def __init__(self, metrics: Metrics) -> None:
        self._jobs: dict[str, JobSpec] = {}
        self._jobs_lock = threading.Lock()
        self._metrics = metrics

    def job(
        self,
        *,
        name: str | None = None,
        every: Duration | None = None,
        cron: str | None = None,
        planner: Planner | None = None,
        timezone: str = "UTC",
        scopes: Iterable[Scope] | ScopesFn | None = None,
        catch_up: CatchUp = "latest_only",
        catch_up_window: Duration = "1d",
        max_plans_per_tick: int | None = None,
        max_lateness: Duration | None = None,
        schedule_delay: Duration = 0,
        overlap: Overlap = "forbid",
        jitter: Duration = 0,
        dst_repeated: DstRepeated | None = None,
        dst_skipped: DstSkipped | None = None,
        run_timeout: Duration = "10m",
        stale_timeout: Duration | None = None,
        heartbeat_interval: Duration | None = None,
        allow_stale_reentry: bool | None = None,
        max_attempts: int = 1,
        retry_backoff: Sequence[Duration] = ("1m",),
        max_running: int | None = None,
        priority: int = 0,
        transactional: bool = False,
        dynamic: bool = False,
        first_sight: FirstSight | None = None,
        on_failure: FailureHook | None = None,
        on_recovery: RecoveryHook | None = None,
        # Typed Never so that type checkers refuse any other keyword, while at run time it
        # reaches build_job, which names the job, the option and the option meant.
        **unknown: Never,
    ) -> Callable[[_F], _F]:
        """Decorator form of :meth:`register` (durations: ``timedelta``, seconds or ``"1h30m"``).

        - ``name``: unique job name (default: the function's name).
        - ``every``: fixed cadence; plans are its multiples since the Unix epoch (UTC).
        - ``cron``: 5-field cron read in ``timezone`` (one of ``every``/``cron``/``planner``).
        - ``planner``: an object whose ``plans_between(start, end)`` gives the plans.
        - ``timezone``: IANA zone of ``cron``.
        - ``scopes``: ``Scope`` values, or ``scopes(now)`` each tick (default ``GLOBAL``).
        - ``catch_up``: ``"latest_only"`` (newest due plan) or ``"every_plan"`` (each missed).
        - ``catch_up_window``: ``every_plan`` ignores plans older than this.
        - ``max_plans_per_tick``: plans per scope per tick (required by ``every_plan``).
        - ``max_lateness``: a plan not started within this of its due time is skipped.
        - ``schedule_delay``: a plan is due this long after its plan time.
        - ``overlap``: ``"forbid"`` waits for the scope's running plan; ``"allow"`` does not.
        - ``jitter``: delays each (scope, plan) by a deterministic fraction of this.
        - ``dst_repeated``: ``"first"``, ``"last"``, ``"both"``: fall-back's repeated times.
        - ``dst_skipped``: ``"shift"`` or ``"skip"``: spring-forward's skipped times.
        - ``run_timeout``: a handler running longer is FAILED ``run_timeout``.
        - ``stale_timeout``: an unrenewed lease is stale after this (> ``run_timeout``).
        - ``heartbeat_interval``: how often the lease is renewed (< ``stale_timeout``).
        - ``allow_stale_reentry``: a dead holder's stale lease is stolen and the plan run
          again (True), or the row is FAILED ``stale_timeout`` (False); default: True for
          ``transactional`` jobs only.
        - ``max_attempts``: attempts per plan, retries included (a steal may add one more).
        - ``retry_backoff``: delay before attempt ``i + 2``; the last entry repeats.
        - ``max_running``: cluster-wide cap on the job's running executions.
        - ``priority``: higher claims first when slots are scarce.
        - ``transactional``: ``run.conn`` commits with SUCCESS iff the lease holds.
        - ``dynamic``: each scope has its own schedule (``put_schedule``), not ``every``...
        - ``first_sight``: a new scope waits for the ``"next"`` plan or runs the ``"latest"``.
        - ``on_failure``: ``on_failure(run, error)`` after every failed attempt (sync or async).
        - ``on_recovery``: ``on_recovery(run)`` at the first success after a failed attempt.

        Any other keyword is a :class:`ConfigError` naming the job and the option meant."""
        options = {k: v for k, v in locals().items() if k not in ("self", "unknown")}
        options.update(unknown)
        return lambda handler: self._decorate(handler, options)

    def _decorate(self, handler: _F, options: dict[str, Any]) -> _F:
        self.register(handler, **options)
        return handler

    def register(self, handler: Handler, **options: Any) -> JobSpec:
        """Validate and add a job (also on a running scheduler: it is planned next tick).

        ``options`` are those of :meth:`job`. Raises :class:`ConfigError` naming the job and
        the field for an unknown or invalid option and for a duplicate job name.
        """
        spec = build_job(handler, **options)
        with self._jobs_lock:
            if spec.name in self._jobs:
                raise ConfigError(f"job {spec.name!r}: name is already registered")
            self._jobs[spec.name] = spec
        self._metrics.declare(spec.name, spec.schedule.nominal_interval(datetime.now(UTC)))
        return spec

    def unregister(self, job: str) -> None:
        """Stop planning and claiming ``job`` on this replica; running executions finish."""
        with self._jobs_lock:
            if self._jobs.pop(job, None) is None:
                raise NotFoundError(f"job {job!r} is not registered")

    @property
    def jobs(self) -> dict[str, JobSpec]:
        """A snapshot of the registered jobs by name."""
        with self._jobs_lock:
            return dict(self._jobs)

    def _job(self, name: str) -> JobSpec:
        spec = self.jobs.get(name)
        if spec is None:
            raise NotFoundError(f"job {name!r} is not registered")
        return spec

    def upcoming(self, job: str, after: datetime | None = None, count: int = 5) -> list[datetime]:
        """The next ``count`` plan times of ``job`` strictly after ``after`` (aware UTC)."""
        after = datetime.now(UTC) if after is None else aware(after, "after")
        return self._job(job).schedule.upcoming(after, count)
