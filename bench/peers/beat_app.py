"""The Celery app every beat of the HA beat workload runs (``celery -A bench.peers.beat_app
beat ...``; see bench/beat.py), configured from ``BENCH_BEAT`` (JSON):

- ``broker``, ``queue``: where the beats publish; ``entries``, ``every_s``: the
  ``beat_schedule``, entries ``e000``, ``e001``... each a ``timedelta(seconds=every_s)``,
  its name its one argument (so the consumer knows the entry of every message);
- ``kind``: ``pgsched`` (``celery beat -S pgsched``: ``dsn`` and ``schema``), ``plain``
  (PersistentScheduler), ``grid`` (PersistentScheduler, each entry an ``on_grid`` schedule:
  due at the epoch-aligned multiples of its cadence, the plans pgsched makes of a
  ``timedelta``) or ``redbeat`` (``redis_url``, ``key_prefix``, ``max_loop_s``; only
  the beat holding redbeat's lock sends).

No worker runs the task: the workload's consumer reads the queue itself. Standard library and
Celery only, so the app loads in the project's and the peers' virtualenvs alike.
"""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timedelta
from typing import Any

from celery import Celery
from celery.schedules import schedstate, schedule

TASK = "bench.beat_noop"
_cfg = json.loads(os.environ.get("BENCH_BEAT", "{}"))


class on_grid(schedule):
    """Due at every multiple of ``run_every`` since the epoch, whenever the last send was:
    a plain beat on the grid pgsched plans a ``timedelta`` on, without the drift of Celery's
    interval schedule (each send due one cadence after the previous one)."""

    def is_due(self, last_run_at: datetime) -> Any:
        every = self.run_every.total_seconds()
        now = self.now().timestamp()
        slot = math.floor(now / every) * every
        last = self.maybe_make_aware(last_run_at).timestamp()
        return schedstate(last < slot, slot + every - now)


def _schedule() -> Any:
    every = timedelta(seconds=_cfg.get("every_s", 5))
    return on_grid(every) if _cfg.get("kind") == "grid" else every


app = Celery("bench_beat", broker=_cfg.get("broker", "memory://"))
app.conf.update(
    timezone="UTC",
    task_default_queue=_cfg.get("queue", "celery"),
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    beat_schedule={
        f"e{i:03d}": {
            "task": TASK,
            "schedule": _schedule(),
            "args": [f"e{i:03d}"],
        }
        for i in range(_cfg.get("entries", 0))
    },
)
if _cfg.get("kind") == "pgsched":
    app.conf.update(beat_pgsched_dsn=_cfg["dsn"], beat_pgsched_schema=_cfg["schema"])
elif _cfg.get("kind") == "redbeat":
    # redbeat's lock timeout is its default, 5 x the beat's longest sleep; a standby beat
    # tries the lock once a sleep. Celery's default sleep (300 s) would put the takeover 25
    # minutes out, so the sleep is the entries' cadence: lock timeout 5 x 5 s = 25 s.
    app.conf.update(
        redbeat_redis_url=_cfg["redis_url"],
        redbeat_key_prefix=_cfg["key_prefix"],
        beat_max_loop_interval=_cfg["max_loop_s"],
    )


@app.task(name=TASK)
def noop(entry: str) -> None:
    """Never run: the message is what is measured."""
