"""pgsched's tables belong to pgsched's own migrations, not to Django models: pgsched reads
and writes them through its operations core. ``Job`` is here for what Django attaches to a
model: the permission to act on jobs (``pgsched.operate``) and the app's ``post_migrate``,
on which pgsched's migration upgrades the tables to this version (``apps.py``).
``Execution`` and ``Schedule`` give the admin its pages of the run history and of dynamic
jobs' schedules, and their view permissions."""

from __future__ import annotations

from django.db import models


class Job(models.Model):  # type: ignore[misc]  # Django has no type hints
    """A job of pgsched's (no table of its own: ``managed = False``, never queried)."""

    class Meta:
        managed = False
        default_permissions = ("view",)
        permissions = (("operate", "Can pause, resume, trigger and retry pgsched's jobs"),)


class Execution(models.Model):  # type: ignore[misc]  # Django has no type hints
    """An execution of pgsched's ledger (no table of its own: ``managed = False``)."""

    class Meta:
        managed = False
        default_permissions = ("view",)


class Schedule(models.Model):  # type: ignore[misc]  # Django has no type hints
    """A stored schedule of a dynamic job (no table of its own: ``managed = False``); writing
    one needs ``pgsched.operate``."""

    class Meta:
        managed = False
        default_permissions = ("view",)
