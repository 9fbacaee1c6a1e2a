"""``celery beat -S pgsched``: Celery's beat on every replica, each plan of each
``beat_schedule`` entry sent once. Each entry is a pgsched job ``celery:<entry>`` whose
handler publishes the task; the beat runs a pgsched replica on a thread of its own, and only
the beat that claimed a plan publishes it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from celery import Celery
from celery.beat import ScheduleEntry
from celery.beat import Scheduler as CeleryScheduler

from .._errors import ConfigError, DatabaseError, PgschedError
from .._planning.payloads import CELERY_JOB
from .._run import Run
from .._scheduler import Scheduler
from .._telemetry.logs import configure_logging
from .entries import CELERY_JOB_DEFAULTS, BeatEntry, app_zone, dynamic_task, read_entry
from .overlap import PreviousTasks
from .publish import Publisher
from .replica import ReplicaThread

# How often Celery's beat loop wakes to check the replica: the replica itself plans, claims
# and publishes on its own loop.
_CHECK_INTERVAL_S = 1.0
_SHUTDOWN_GRACE_S = 10.0
# A claimed plan holds its slot until its SUCCESS row is written (many rows a statement), so
# the slots, not the broker, bound how many plans a beat sends a second: the entries of a
# beat_schedule due at one instant (hundreds) are claimed in one joint claim only when that
# many slots are free, then wait for a broker connection each (at most PUBLISHES_IN_FLIGHT
# sending at once, the pool's bound).
CLAIMED_AT_ONCE = 1_000
PUBLISHES_IN_FLIGHT = 64


@dataclass(frozen=True)
class BeatSettings:
    """Where a beat finds its database, read from the Celery config as ``pgsched run`` reads
    its environment."""

    dsn: str | None
    schema: str
    http_port: int | None
    http_host: str
    migrate: bool
    max_concurrency: int
    track: bool  # the workers call pgsched.celery.track(app): overlap="forbid" may wait on it
    dynamic: bool = True  # the dynamic job "celery": schedules put as data

    @classmethod
    def from_app(cls, app: Celery) -> BeatSettings:
        conf = app.conf
        port = conf.get("beat_pgsched_http_port")
        return cls(
            dsn=conf.get("beat_pgsched_dsn") or None,  # None: PGSCHED_DSN, then DATABASE_URL
            schema=conf.get("beat_pgsched_schema") or os.environ.get("PGSCHED_SCHEMA") or "pgsched",
            http_port=None if port in (None, "") else _number("beat_pgsched_http_port", port, 0),
            http_host=conf.get("beat_pgsched_http_host") or "127.0.0.1",
            migrate=bool(conf.get("beat_pgsched_migrate")),
            max_concurrency=_number(
                "beat_pgsched_max_concurrency",
                conf.get("beat_pgsched_max_concurrency") or CLAIMED_AT_ONCE,
                1,
            ),
            track=_flag("beat_pgsched_track", conf.get("beat_pgsched_track"), False),
            dynamic=_flag("beat_pgsched_dynamic", conf.get("beat_pgsched_dynamic"), True),
        )


def _flag(setting: str, value: object, default: bool) -> bool:
    """A true/false setting (a string from the environment too), else a ConfigError."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"celery setting {setting}={value!r} must be True or False")


def _number(setting: str, value: object, least: int) -> int:
    """A whole-number setting (a string from the environment too), else a ConfigError."""
    try:
        number = int(str(value))
    except ValueError:
        number = least - 1
    if isinstance(value, bool) or number < least:
        raise ConfigError(f"celery setting {setting}={value!r} must be an integer >= {least}")
    return number


def build_scheduler(
    app: Celery,
    entries: Iterable[ScheduleEntry],
    publisher: Publisher | None,
    *,
    dynamic: bool = True,
    **options: Any,
) -> tuple[Scheduler, list[BeatEntry]]:
    """A pgsched ``Scheduler`` with one job per entry (``options`` are the Scheduler's), and
    with ``dynamic`` the dynamic job ``celery`` whose schedules are tasks put as data; its
    handlers publish through ``publisher`` (None: jobs for inspection only, which must not
    run). Raises :class:`ConfigError` naming the first entry pgsched cannot plan."""
    zone = app_zone(app)
    tracked = _flag("beat_pgsched_track", app.conf.get("beat_pgsched_track"), False)
    read = [read_entry(entry, zone, tracked=tracked) for entry in entries]
    scheduler = Scheduler(**options)
    previous = None
    if publisher is not None:
        previous = PreviousTasks(lambda: scheduler.admin, publisher.stopping)
    for entry in read:
        waits = previous if entry.waits_for_previous else None
        scheduler.register(_handler(entry, publisher, waits), name=entry.job, **entry.job_options)
    if dynamic:
        scheduler.register(
            _dynamic_handler(publisher), name=CELERY_JOB, dynamic=True, **CELERY_JOB_DEFAULTS
        )
    return scheduler, read


def _handler(entry: BeatEntry, publisher: Publisher | None, previous: PreviousTasks | None) -> Any:
    def publish(run: Run) -> None:
        if publisher is None:
            raise PgschedError(f"job {entry.job!r}: built for inspection, not to publish")
        if previous is not None:
            previous.wait(entry, run)
        task_id = publisher.publish(entry, run)
        run.log.info("celery_task_sent", task=entry.task, task_id=task_id)

    publish.__name__ = publish.__qualname__ = "publish"
    return publish


def _dynamic_handler(publisher: Publisher | None) -> Any:
    def publish(run: Run) -> None:
        if publisher is None:
            raise PgschedError(f"job {CELERY_JOB!r}: built for inspection, not to publish")
        task = dynamic_task(run.scope, run.payload)  # as claimed, checked again
        task_id = publisher.send(task.task, task.args, task.kwargs, task.options, run)
        run.log.info("celery_task_sent", task=task.task, task_id=task_id)

    publish.__name__ = publish.__qualname__ = "publish"
    return publish


def _require_migrated(scheduler: Scheduler) -> None:
    """Refuse a schema that is not migrated (the replica would only log tick errors)."""
    try:
        migrated = scheduler.admin.is_migrated()
    except DatabaseError:
        return  # not reachable now: the replica waits for the database and says so
    if not migrated:
        raise PgschedError(
            f"schema {scheduler.schema!r} is not migrated: run `pgsched migrate`"
            " (or set beat_pgsched_migrate = True)"
        )


def _configure_logging() -> None:
    """pgsched's events on the process's real stderr, one JSON line each, as ``pgsched run``
    prints them, leaving Celery's logging (its handlers, its redirected stdout) as it was."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    with contextlib.redirect_stderr(sys.__stderr__):
        configure_logging()
    root.handlers, root.level = handlers, level


class BeatScheduler(CeleryScheduler):  # type: ignore[misc]  # Celery has no type hints
    """Celery's beat scheduler backed by pgsched's ledger (``celery beat -S pgsched``).

    Built with ``lazy=True`` (Celery does so to print its banner) it does nothing: no
    database, no broker, no thread. Otherwise ``setup_schedule`` reads ``beat_schedule``
    (refusing an entry pgsched cannot plan with one line naming it), migrates when
    ``beat_pgsched_migrate`` is true, and starts the replica; ``tick`` only checks it.
    """

    def __init__(self, app: Celery, *args: Any, **kwargs: Any) -> None:
        self._replica: ReplicaThread | None = None
        self._publisher: Publisher | None = None
        try:
            self._settings = BeatSettings.from_app(app)
        except ConfigError as exc:
            raise SystemExit(f"celery beat -S pgsched: {exc}") from None
        self.pgsched: Scheduler | None = None  # the running replica's scheduler
        super().__init__(app, *args, **kwargs)

    def setup_schedule(self) -> None:
        super().setup_schedule()  # beat_schedule (and Celery's default entries) as entries
        settings = self._settings
        try:
            _configure_logging()
            publisher = Publisher(self.app, min(settings.max_concurrency, PUBLISHES_IN_FLIGHT))
            scheduler, _ = build_scheduler(
                self.app,
                self.schedule.values(),
                publisher,
                dsn=settings.dsn,
                schema=settings.schema,
                dynamic=settings.dynamic,
                max_concurrency=settings.max_concurrency,
                shutdown_grace=_SHUTDOWN_GRACE_S,
            )
            if settings.migrate:
                scheduler.migrate()
            else:
                _require_migrated(scheduler)
        except PgschedError as exc:
            # One line, not Celery's traceback of an error in the beat's set-up.
            raise SystemExit(f"celery beat -S pgsched: {exc}") from None
        self._publisher, self.pgsched = publisher, scheduler
        self._replica = ReplicaThread(scheduler, settings.http_port, settings.http_host)
        self._replica.start()

    def tick(self, *args: Any, **kwargs: Any) -> float:
        """Raise when the replica died (the beat then exits non-zero); else when to look
        again. Plans are claimed and published on the replica's own loop."""
        if self._replica is not None:
            self._replica.check()
        return min(float(self.max_interval), _CHECK_INTERVAL_S)

    def sync(self) -> None:
        """Nothing to save: the ledger is written as plans are claimed and finished."""

    def close(self) -> None:
        replica, self._replica = self._replica, None
        if self._publisher is not None:
            self._publisher.stopping.set()  # publishes waiting for a previous task give up
        if replica is not None:
            replica.stop(_SHUTDOWN_GRACE_S + 5.0)
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            publisher.close()
        super().close()

    @property
    def info(self) -> str:
        entries = len(self.app.conf.beat_schedule or {})
        dynamic = f", dynamic job {CELERY_JOB!r}" if self._settings.dynamic else ""
        return f"    . pgsched -> schema {self._settings.schema}, {entries} entries{dynamic}"
