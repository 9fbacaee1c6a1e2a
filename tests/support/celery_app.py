"""The Celery app the celery tests' beats and workers run (``-A tests.support.celery_app``),
configured from the environment so each test has its own broker database, queue, schedule,
record file and pgsched schema:

- ``CELERY_TEST_BROKER``: the broker URL; ``CELERY_TEST_QUEUE``: the queue beats send to;
- ``CELERY_TEST_SCHEDULE``: JSON ``{entry: {"every": seconds} | {"cron": {crontab kwargs}} |
  {"solar": [event, lat, lon]}, with optional "task" (``tests.record``; ``tests.fail``
  which records, then raises; ``tests.flaky``, which records, then has Celery retry it once
  before it succeeds; ``tests.slow``, which records, sleeps ``CELERY_TEST_SLOW_S`` seconds,
  then records its end as ``"end": true``) and "pgsched": {...}}``;
- ``CELERY_TEST_RECORD``: the file the worker appends one JSON line per task to (its id and
  the pgsched headers), the side effect whose duplicates the tests count;
- ``CELERY_TEST_TIMEZONE``; ``CELERY_TEST_TRACK=1``: the worker calls
  ``pgsched.celery.track(app)`` and a beat has ``beat_pgsched_track``; pgsched's own
  settings come from ``PGSCHED_DSN`` / ``PGSCHED_SCHEMA`` as in a deployment,
  ``beat_pgsched_migrate`` is on.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar, cast

from celery import Celery
from celery.schedules import BaseSchedule, crontab, solar

app = Celery("pgsched_tests", broker=os.environ.get("CELERY_TEST_BROKER", "memory://"))
app.conf.update(
    task_default_queue=os.environ.get("CELERY_TEST_QUEUE", "celery"),
    timezone=os.environ.get("CELERY_TEST_TIMEZONE", "UTC"),
    worker_enable_remote_control=False,
    broker_connection_retry_on_startup=True,
    beat_pgsched_migrate=os.environ.get("CELERY_TEST_MIGRATE", "1") == "1",
    beat_pgsched_http_port=os.environ.get("CELERY_TEST_HTTP_PORT"),
    beat_pgsched_track=os.environ.get("CELERY_TEST_TRACK") == "1",
)


def _schedule(spec: dict[str, Any]) -> Any:
    if "every" in spec:
        return timedelta(seconds=spec["every"])
    if "cron" in spec:
        return crontab(**spec["cron"])
    # As solar(...) builds it, without the ephem library it needs to compute (never asked).
    when = solar.__new__(solar)
    when.event, when.lat, when.lon = spec["solar"]
    BaseSchedule.__init__(when)
    return when


def _entries(raw: str) -> dict[str, Any]:
    entries = {}
    for name, spec in json.loads(raw).items():
        task = spec.get("task", "tests.record")
        entry: dict[str, Any] = {"task": task, "schedule": _schedule(spec)}
        entry["args"] = [name]
        if "pgsched" in spec:
            entry["options"] = {"pgsched": spec["pgsched"]}
        entries[name] = entry
    return entries


app.conf.beat_schedule = _entries(os.environ.get("CELERY_TEST_SCHEDULE", "{}"))
_F = TypeVar("_F", bound=Callable[..., Any])


def task(**options: Any) -> Callable[[_F], _F]:
    """``app.task`` typed (Celery has no type hints): the function is registered, and kept."""
    return cast(Callable[[_F], _F], app.task(**options))


@task(name="tests.record", bind=True)
def record(self: Any, entry: str) -> None:
    _write(self.request, entry)


def _write(request: Any, entry: str, **more: Any) -> None:
    headers = request.headers or {}

    def header(name: str) -> Any:
        return getattr(request, name, None) or headers.get(name)

    line = {
        "entry": entry,
        "task_id": request.id,
        "plan_time": header("pgsched_plan_time"),
        "execution_id": header("pgsched_execution_id"),
        "scope": header("pgsched_scope"),
        "retries": request.retries,
        **more,
    }
    with open(os.environ["CELERY_TEST_RECORD"], "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


@task(name="tests.fail", bind=True)
def fail(self: Any, entry: str) -> None:
    _write(self.request, entry)
    raise ValueError(f"{entry} failed on purpose")


@task(name="tests.flaky", bind=True)
def flaky(self: Any, entry: str) -> None:
    _write(self.request, entry)
    if self.request.retries == 0:
        raise self.retry(countdown=0.2, max_retries=1)


@task(name="tests.slow", bind=True)
def slow(self: Any, entry: str) -> None:
    _write(self.request, entry)
    time.sleep(float(os.environ.get("CELERY_TEST_SLOW_S", "3")))
    _write(self.request, entry, end=True)


if os.environ.get("CELERY_TEST_TRACK") == "1":
    from pgsched.celery import track

    track(app)
