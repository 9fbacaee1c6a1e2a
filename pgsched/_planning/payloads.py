"""What the payload of a schedule of pgsched's own dynamic jobs must hold, checked when the
schedule is put (by any facade: ``Admin``, ``Scheduler``, the HTTP API, the command line) and
again when its plan runs. Only the job ``celery`` has rules so far: each of its schedules is a
Celery task a pgsched beat sends (docs/celery.md, "Schedules as data"). Pure: no Celery here,
so an operator's ``pgsched schedules put`` checks without it installed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from numbers import Real
from typing import Any

CELERY_JOB = "celery"
# The send_task options a schedule's payload may carry, with the JSON types each takes.
_STR = (str,)
_NUMBER = (int, float)
CELERY_OPTIONS: dict[str, tuple[type, ...]] = {
    "queue": _STR,
    "exchange": _STR,
    "routing_key": _STR,
    "priority": (int,),
    "expires": (int, float, str),  # seconds after the send, or an ISO 8601 instant
    "headers": (dict,),
    "countdown": _NUMBER,
    "time_limit": _NUMBER,
    "soft_time_limit": _NUMBER,
    "serializer": _STR,
    "compression": _STR,
    "shadow": _STR,
    "ignore_result": (bool,),
}
# The keys of a celery schedule's payload; "description" is kept for people, never sent.
CELERY_PAYLOAD_KEYS = ("task", "args", "kwargs", "options", "description")


class PayloadError(ValueError):
    """A payload a job's rules refuse: the message names the field and the value."""


def _show(value: object) -> str:
    try:
        text = json.dumps(value, sort_keys=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _bad(field: str, value: object, why: str) -> PayloadError:
    return PayloadError(f"payload[{field}]={_show(value)} {why}")


def check_celery_payload(payload: Mapping[str, Any]) -> None:
    """Raise :class:`PayloadError` unless ``payload`` is a task to send: ``task`` a task name,
    ``args`` a list, ``kwargs`` an object, ``options`` an object of send_task options."""
    unknown = sorted(set(payload) - set(CELERY_PAYLOAD_KEYS))
    if unknown:
        known = ", ".join(CELERY_PAYLOAD_KEYS)
        raise _bad(repr(unknown[0]), payload[unknown[0]], f"is not a key of it (known: {known})")
    task = payload.get("task")
    if not isinstance(task, str) or not task.strip():
        raise _bad("'task'", task, "must be the task's name (a non-empty string)")
    if not isinstance(payload.get("args", []), list):
        raise _bad("'args'", payload["args"], "must be a list")
    if not isinstance(payload.get("kwargs", {}), dict):
        raise _bad("'kwargs'", payload["kwargs"], "must be an object")
    if not isinstance(payload.get("description", ""), str):
        raise _bad("'description'", payload["description"], "must be a string")
    options = payload.get("options", {})
    if not isinstance(options, dict):
        raise _bad("'options'", options, "must be an object")
    for key, value in options.items():
        _check_option(key, value)


def _check_option(key: str, value: object) -> None:
    field = f"'options'][{key!r}"
    types = CELERY_OPTIONS.get(key)
    if types is None:
        known = ", ".join(sorted(CELERY_OPTIONS))
        raise _bad(field, value, f"is not a send_task option pgsched sends (known: {known})")
    if (isinstance(value, bool) and bool not in types) or not isinstance(value, types):
        names = " or ".join(_TYPE_NAMES[t] for t in types)
        raise _bad(field, value, f"must be {names}")
    if key == "priority" and not 0 <= int(value) <= 255:  # type: ignore[call-overload]
        raise _bad(field, value, "must be from 0 to 255")
    if isinstance(value, Real) and not isinstance(value, bool) and value < 0:
        raise _bad(field, value, "must not be negative")
    if key == "expires" and isinstance(value, str):
        try:
            aware = datetime.fromisoformat(value).tzinfo is not None
        except ValueError:
            aware = False
        if not aware:
            raise _bad(field, value, "must be an ISO 8601 instant with its UTC offset")


_TYPE_NAMES = {
    str: "a string",
    int: "an integer",
    float: "a number",
    dict: "an object",
    bool: "true or false",
}

# The payload rules of pgsched's own dynamic jobs, by job name.
PAYLOAD_CHECKS: dict[str, Callable[[Mapping[str, Any]], None]] = {
    CELERY_JOB: check_celery_payload,
}
