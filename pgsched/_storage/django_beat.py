"""The read of django-celery-beat's tables (``pgsched celery import-django-celery-beat``): its
periodic tasks with their interval, crontab and clocked schedules, on the source connection's
search_path. Read only: the originals are left as they are."""

from __future__ import annotations

from .._records import Row
from .statements import Conn, Statements


class DjangoBeatStore(Statements):
    """The statement over django-celery-beat's tables (``django_beat_tasks``)."""

    async def periodic_tasks(self, conn: Conn) -> list[Row]:
        """Every ``django_celery_beat_periodictask`` row, by name, with its schedule's columns
        (``interval_*``, ``cron_*``, ``clocked_time``; ``solar_id`` when it is solar)."""
        return await self._many(conn, "django_beat_tasks")
