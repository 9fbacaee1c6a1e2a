"""``app.conf.beat_schedule`` entries read as pgsched jobs: each entry's recurrence (a crontab in
the app's zone, an interval), its publish options and the pgsched options it carries under
``options["pgsched"]``. Pure: nothing here connects to a broker or a database.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from celery import Celery
from celery.beat import BeatLazyFunc, ScheduleEntry
from celery.schedules import crontab, schedule

from .._errors import ConfigError, PgschedError
from .._planning.payloads import CELERY_JOB, PayloadError, check_celery_payload
from .._structures import GLOBAL, Scope

JOB_PREFIX = "celery:"
# What a beat's job does unless the entry says otherwise: a publish takes milliseconds, so a
# beat that died mid-publish has its lease stolen within seconds and the plan published by
# another beat (with the same task id); a publish that failed is tried again shortly.
CELERY_JOB_DEFAULTS: dict[str, Any] = {
    "overlap": "allow",
    "allow_stale_reentry": True,
    "run_timeout": "10s",
    "stale_timeout": "15s",
    "heartbeat_interval": "5s",
    "max_attempts": 3,
    "retry_backoff": ("1s", "5s"),
    "catch_up": "latest_only",
}
# overlap="forbid": the publish of a plan waits for the previous plan's task in a worker, so
# the job's run_timeout bounds that task (past it, the task counts as lost) unless given.
FORBID_RUN_TIMEOUT = "1h"
# The pgsched options an entry may set under options["pgsched"].
ENTRY_OPTIONS = frozenset(
    {
        "catch_up",
        "catch_up_window",
        "max_plans_per_tick",
        "max_lateness",
        "jitter",
        "scopes",
        "overlap",
        "max_attempts",
        "retry_backoff",
        "priority",
        "run_timeout",
        "calendar",
        "on_excluded",
    }
)
# every_plan needs a per-tick bound; an entry that does not give one gets this.
_PLANS_PER_TICK = 10
# Celery's crontab fields, in cron's order, with their full ranges.
_CRON_FIELDS = (
    ("minute", range(60)),
    ("hour", range(24)),
    ("day_of_month", range(1, 32)),
    ("month_of_year", range(1, 13)),
    ("day_of_week", range(7)),
)


@dataclass(frozen=True)
class BeatEntry:
    """One beat_schedule entry as a pgsched job: what to publish and how it is planned."""

    entry: str
    task: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    options: dict[str, Any]  # passed to send_task unchanged, options["pgsched"] removed
    job_options: dict[str, Any] = field(default_factory=dict)  # for Scheduler.register

    @property
    def job(self) -> str:
        return JOB_PREFIX + self.entry

    @property
    def waits_for_previous(self) -> bool:
        """overlap="forbid": a plan is sent once the previous plan's task has an outcome."""
        return bool(self.job_options.get("overlap") == "forbid")

    def call_args(self) -> tuple[list[Any], dict[str, Any]]:
        """The task's args and kwargs, beat's lazy values (``BeatLazyFunc``) evaluated now."""
        args = [v() if isinstance(v, BeatLazyFunc) else v for v in self.args]
        kwargs = {k: v() if isinstance(v, BeatLazyFunc) else v for k, v in self.kwargs.items()}
        return args, kwargs


@dataclass(frozen=True)
class DynamicTask:
    """The task a schedule of the dynamic job ``celery`` sends: its payload, read."""

    task: str
    args: list[Any]
    kwargs: dict[str, Any]
    options: dict[str, Any]  # send_task's


def dynamic_task(scope: Scope, payload: dict[str, Any]) -> DynamicTask:
    """The task of a ``celery`` schedule's payload (as the claim read it). A payload is
    checked when it is put; one written otherwise is refused here, naming the schedule, so
    the plan's row says why nothing was sent."""
    try:
        check_celery_payload(payload)
    except PayloadError as exc:
        raise PgschedError(f"job {CELERY_JOB!r}, scope {scope}: {exc}") from None
    return DynamicTask(
        task=payload["task"],
        args=list(payload.get("args") or []),
        kwargs=dict(payload.get("kwargs") or {}),
        options=dict(payload.get("options") or {}),
    )


def app_zone(app: Celery) -> str:
    """The IANA zone Celery reads crontabs in: ``timezone``, else UTC with ``enable_utc``,
    else the machine's."""
    zone = app.timezone
    key = getattr(zone, "key", None)
    if not isinstance(key, str):
        raise ConfigError(f"celery timezone {zone!r} has no IANA name: set app.conf.timezone")
    return key


def read_entry(entry: ScheduleEntry, zone: str, *, tracked: bool = False) -> BeatEntry:
    """``entry`` as a :class:`BeatEntry`, or a :class:`ConfigError` naming it. ``tracked``:
    the workers record outcomes (``beat_pgsched_track``), which overlap="forbid" needs."""
    name = entry.name
    options = dict(entry.options or {})
    ours = options.pop("pgsched", None) or {}
    if not isinstance(ours, dict):
        raise ConfigError(f"beat_schedule entry {name!r}: options['pgsched'] must be a dict")
    unknown = sorted(set(ours) - ENTRY_OPTIONS)
    if unknown:
        raise ConfigError(
            f"beat_schedule entry {name!r}: unknown pgsched option {unknown[0]!r}"
            f" (known: {', '.join(sorted(ENTRY_OPTIONS))})"
        )
    job_options = {**CELERY_JOB_DEFAULTS, **recurrence(name, entry.schedule, zone), **ours}
    if "scopes" in ours:
        job_options["scopes"] = _scopes(name, ours["scopes"])
    if job_options["catch_up"] == "every_plan":
        job_options.setdefault("max_plans_per_tick", _PLANS_PER_TICK)
    if job_options["overlap"] == "forbid":
        if not tracked:
            raise ConfigError(
                f"beat_schedule entry {name!r}: pgsched overlap='forbid' waits for the outcome"
                " of the previous task, which only workers calling pgsched.celery.track(app)"
                " record: set beat_pgsched_track = True"
            )
        if "run_timeout" not in ours:
            job_options["run_timeout"] = FORBID_RUN_TIMEOUT
        # A lease must outlive run_timeout (pgsched's rule): the default, run_timeout + 1 min.
        job_options["stale_timeout"] = None
    return BeatEntry(
        entry=name,
        task=entry.task,
        args=tuple(entry.args or ()),
        kwargs=dict(entry.kwargs or {}),
        options=options,
        job_options=job_options,
    )


def recurrence(name: str, when: object, zone: str) -> dict[str, Any]:
    """The job options of an entry's schedule: ``every`` or ``cron`` and ``timezone``."""
    # Exact classes only: a subclass may override is_due with rules a cron cannot express.
    if type(when) is schedule:
        every = getattr(when, "run_every", None)
        if not isinstance(every, timedelta) or every <= timedelta(0):
            raise ConfigError(f"beat_schedule entry {name!r}: interval {every!r} must be > 0")
        return {"every": every}
    if type(when) is crontab:
        return {"cron": cron_expression(name, when), "timezone": zone}
    kind = type(when).__name__
    raise ConfigError(
        f"beat_schedule entry {name!r}: a {kind} schedule is not supported by pgsched"
        " (use crontab(...), a timedelta or a number of seconds)"
    )


def cron_expression(name: str, when: crontab) -> str:
    """The five-field cron expression of a Celery crontab (its fields as Celery expanded
    them, since Celery's own syntax, such as ``*/3`` over a range, reads differently)."""
    fields = {attr: _cron_field(getattr(when, attr), full) for attr, full in _CRON_FIELDS}
    if fields["day_of_month"] != "*" and fields["day_of_week"] != "*":
        # Celery fires on days matching both; cron on days matching either.
        raise ConfigError(
            f"beat_schedule entry {name!r}: a crontab restricting both day_of_month and"
            " day_of_week (days matching both) cannot be expressed as a cron expression"
            " (days matching either); restrict one of them"
        )
    return " ".join(fields[attr] for attr, _ in _CRON_FIELDS)


def _cron_field(values: Iterable[int], full: range) -> str:
    chosen = sorted(set(values))
    if chosen == list(full):
        return "*"
    parts: list[str] = []
    start = prev = chosen[0]
    for value in [*chosen[1:], None]:
        if value is not None and value == prev + 1:
            prev = value
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if value is not None:
            start = prev = value
    return ",".join(parts)


def _scopes(name: str, given: object) -> list[Scope] | Callable[..., Any]:
    """An entry's fan-out: ``Scope`` values or ``"kind:id"`` strings, or a callable."""
    if callable(given):
        return given
    if isinstance(given, str | bytes) or not isinstance(given, Iterable):
        raise ConfigError(
            f"beat_schedule entry {name!r}: pgsched scopes={given!r} must be a list of"
            " Scope values or 'kind:id' strings"
        )
    scopes: list[Scope] = []
    for item in given:
        if isinstance(item, Scope):
            scopes.append(item)
        elif isinstance(item, str) and ":" in item:
            kind, _, ident = item.partition(":")
            scopes.append(Scope(kind, ident))
        else:
            raise ConfigError(
                f"beat_schedule entry {name!r}: pgsched scope {item!r} must be a Scope or"
                " a 'kind:id' string"
            )
    return scopes


def scope_header(scope: Scope) -> dict[str, str]:
    """The header naming a fan-out's scope (none for the global scope)."""
    return {} if scope == GLOBAL else {"pgsched_scope": f"{scope.kind}:{scope.id}"}
