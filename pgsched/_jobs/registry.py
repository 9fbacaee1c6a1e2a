"""Registration of code-defined jobs: ``Scheduler.job`` (its options typed by ``JobOptions``),
``register``, ``unregister`` and ``upcoming``. Owns the registered jobs; runs nothing.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TypeVar, Unpack

from .._errors import ConfigError, NotFoundError
from .._planning.calendars import Calendar
from .._telemetry.metrics import Metrics
from .._times import aware
from .spec import Handler, JobOptions, JobSpec, build_job

_F = TypeVar("_F", bound=Handler)


class JobRegistry:
    """The jobs of one scheduler, by name (thread-safe: jobs may be added while it runs)."""

    def __init__(self, metrics: Metrics) -> None:
        self._jobs: dict[str, JobSpec] = {}
        self._jobs_lock = threading.Lock()
        self._metrics = metrics
        self._calendars: dict[str, Calendar] = {}  # shared with the dynamic jobs, by name

    def job(self, **options: Unpack[JobOptions]) -> Callable[[_F], _F]:
        """Register the decorated function (or ``async def``) taking a :class:`Run` as a job,
        with the options :class:`JobOptions` describes (typed: editors and mypy refuse an
        unknown one; at run time it is a :class:`ConfigError` naming the job and the option
        meant)."""
        return lambda handler: self._decorate(handler, options)

    def _decorate(self, handler: _F, options: JobOptions) -> _F:
        self.register(handler, **options)
        return handler

    def register(self, handler: Handler, **options: Unpack[JobOptions]) -> JobSpec:
        """Validate and add a job (also on a running scheduler: it is planned next tick).

        ``options`` are :class:`JobOptions`, as :meth:`job` takes them. Raises
        :class:`ConfigError` naming the job and the field for an unknown or invalid option and
        for a duplicate job name.
        """
        spec = build_job(handler, **options)
        if spec.dynamic:
            spec = dataclasses.replace(spec, calendars=self._calendars)
        with self._jobs_lock:
            if spec.name in self._jobs:
                raise ConfigError(f"job {spec.name!r}: name is already registered")
            self._jobs[spec.name] = spec
        self._metrics.declare(spec.name, spec.recurrence.nominal_interval(datetime.now(UTC)))
        return spec

    def calendar(self, name: str, calendar: Calendar) -> Calendar:
        """Name ``calendar`` for the schedules of this scheduler's dynamic jobs, which refer to
        it as ``"calendar": name`` (a put naming another is refused). Naming it again with an
        equal calendar is a no-op; with another, a :class:`ConfigError`: the replicas would
        plan by different calendars."""
        if not isinstance(name, str) or not name or len(name) > 200 or not name.isprintable():
            raise ConfigError(f"calendar: name={name!r} must be printable text of 1-200 characters")
        if not isinstance(calendar, Calendar):
            raise ConfigError(f"calendar {name!r}: {calendar!r} must be a pgsched.Calendar")
        with self._jobs_lock:
            known = self._calendars.setdefault(name, calendar)
        if known != calendar:
            raise ConfigError(f"calendar {name!r}: name is already registered for {known!r}")
        return calendar

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
        return self._job(job).recurrence.upcoming(after, count)
