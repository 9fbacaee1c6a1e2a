"""The django-celery-beat peer (pinned in bench/requirements-peers.txt): schedules as data
in Django models, fired by celery beat, run by a celery worker over the machine's Redis.

Each scope is one ``PeriodicTask`` (``name`` = the scope, the scope in its kwargs) with a
``CrontabSchedule`` of its own (expression and time zone). celery beat runs only once per
cluster (a second beat would fire everything twice), so a trial has two processes: replica 0
is ``celery beat`` with django-celery-beat's ``DatabaseScheduler``, replica 1 a ``celery
worker`` (8 threads) that runs the task: one INSERT into the ledger. The beat stamps each
task it sends with its plan (the schedule's latest occurrence at or before the send) and
the send time.

``python -m bench.peers.celery_peer setup`` applies django-celery-beat's migrations and
empties the trial's Redis queue; ``... drive ...`` runs the driver (bench.peers.dynamic)
with bulk_create (create or replace by name, one transaction per batch) and delete.
"""

from __future__ import annotations

import os
import sys
import threading
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.peers.celery_settings")

import django

django.setup()

import psycopg  # noqa: E402
from celery import Celery  # noqa: E402
from croniter import croniter  # noqa: E402
from django.db import transaction  # noqa: E402
from django_celery_beat.models import CrontabSchedule, PeriodicTask, PeriodicTasks  # noqa: E402
from django_celery_beat.schedulers import DatabaseScheduler  # noqa: E402

from bench.peers import common, dynamic  # noqa: E402

TASK = "bench_run"
QUEUE = "bench-" + os.environ["BENCH_DSN"].rsplit("/", 1)[-1]
app = Celery("bench", broker=os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/0"))
app.conf.update(
    timezone="UTC",
    task_default_queue=QUEUE,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    worker_prefetch_multiplier=64,
    broker_connection_retry_on_startup=True,
    beat_max_loop_interval=1,
)
_local = threading.local()
LEDGER_INSERT = (
    f"INSERT INTO {common.LEDGER_TABLE} (job, scope, plan_time, runner, claimed_at) "
    "VALUES (%s, %s, %s, %s, to_timestamp(%s))"
)


@app.task(name=TASK)
def bench_run(scope: str, plan: str, sent: float) -> None:
    cfg = common.config()
    conn = getattr(_local, "conn", None)
    if conn is None:
        conn = _local.conn = psycopg.connect(cfg.dsn, autocommit=True)
    conn.execute(LEDGER_INSERT, (cfg.job, scope, datetime.fromisoformat(plan), cfg.runner, sent))


def plan_of(crontab: CrontabSchedule, now: datetime) -> datetime:
    """The latest occurrence of ``crontab`` at or before ``now`` (UTC)."""
    fields = (
        crontab.minute,
        crontab.hour,
        crontab.day_of_month,
        crontab.month_of_year,
        crontab.day_of_week,
    )
    local = now.astimezone(ZoneInfo(str(crontab.timezone))) + timedelta(microseconds=1)
    return croniter(" ".join(fields), local).get_prev(datetime).astimezone(UTC)


class BenchScheduler(DatabaseScheduler):
    """django-celery-beat's scheduler; each task it sends carries its plan and send time."""

    def apply_async(self, entry, producer=None, advance=True, **kwargs):  # type: ignore[no-untyped-def]
        entry = self.reserve(entry) if advance else entry
        now = datetime.now(UTC)
        plan = plan_of(entry.model.crontab, now)
        entry.kwargs = {**entry.kwargs, "plan": plan.isoformat(), "sent": now.timestamp()}
        return super().apply_async(entry, producer, advance=False, **kwargs)


def setup() -> None:
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    with app.connection_for_write() as conn:
        conn.default_channel.queue_purge(QUEUE)


def main() -> None:
    cfg = common.config()
    common.count_psycopg_statements()
    common.start_reporting(cfg)
    if cfg.replica == 0:
        app.start(["beat", "-S", "bench.peers.celery_peer:BenchScheduler", "-l", "WARNING"])
    else:
        app.start(
            ["worker", "-P", "threads", "-c", "8", "-n", f"{cfg.runner}@bench", "-l", "WARNING"]
        )


class CeleryAdapter:
    cadences = dynamic.MINUTE_CADENCES  # crontab has no seconds: minute steps

    def __init__(self) -> None:
        django.db.connections.close_all()

    @staticmethod
    def crontab(s: dynamic.Spec) -> CrontabSchedule:
        expr = s.cron if s.every_s is None else f"*/{s.every_s // 60} * * * *"
        minute, hour, dom, month, dow = str(expr).split()
        return CrontabSchedule(
            minute=minute,
            hour=hour,
            day_of_month=dom,
            month_of_year=month,
            day_of_week=dow,
            timezone=ZoneInfo(s.zone),
        )

    def put(self, specs: list[dynamic.Spec]) -> None:
        now = datetime.now(UTC)
        with transaction.atomic():
            crons = CrontabSchedule.objects.bulk_create([self.crontab(s) for s in specs])
            PeriodicTask.objects.bulk_create(
                [
                    PeriodicTask(
                        name=s.scope,
                        task=TASK,
                        crontab=c,
                        kwargs=f'{{"scope": "{s.scope}"}}',
                        enabled=True,
                        date_changed=now,
                    )
                    for s, c in zip(specs, crons, strict=True)
                ],
                update_conflicts=True,
                unique_fields=["name"],
                update_fields=["crontab", "kwargs", "enabled", "date_changed"],
            )
            PeriodicTasks.update_changed()

    def delete(self, scope: str) -> None:
        with transaction.atomic():
            PeriodicTask.objects.filter(name=scope).delete()
            PeriodicTasks.update_changed()


if __name__ == "__main__":
    if sys.argv[1:] == ["setup"]:
        setup()
    elif sys.argv[1:2] == ["drive"]:
        dynamic.drive(CeleryAdapter, sys.argv[2:])
    else:
        main()
