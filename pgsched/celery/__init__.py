"""Celery beat on every replica, each plan sent once: ``celery -A proj beat -S pgsched``
(docs/celery.md). Needs the ``celery`` extra (``pip install pgsched[celery]``)."""

from .._planning.payloads import CELERY_JOB
from .beat import BeatScheduler, BeatSettings, build_scheduler
from .entries import CELERY_JOB_DEFAULTS, JOB_PREFIX, BeatEntry, cron_expression, read_entry
from .track import Tracker, track

__all__ = [
    "CELERY_JOB",
    "CELERY_JOB_DEFAULTS",
    "JOB_PREFIX",
    "BeatEntry",
    "BeatScheduler",
    "BeatSettings",
    "Tracker",
    "build_scheduler",
    "cron_expression",
    "read_entry",
    "track",
]
