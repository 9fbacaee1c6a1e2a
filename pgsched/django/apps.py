"""The Django app: imports every installed app's ``jobs.py`` once the apps are loaded, as
Django's admin does with ``admin.py``, and upgrades pgsched's tables after each
``manage.py migrate``."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.db.models.signals import post_migrate
from django.utils.module_loading import autodiscover_modules

from .._errors import ConfigError
from .conf import project_scheduler


class PgschedConfig(AppConfig):  # type: ignore[misc]  # Django has no type hints
    name = "pgsched.django"
    label = "pgsched"
    verbose_name = "pgsched"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        checks.register(check_settings, "pgsched")
        # Settings pgsched cannot use are reported by the system checks and by each use of
        # the scheduler (one line each), not by a traceback out of every manage.py command:
        # so the jobs.py modules, which need the scheduler, are imported only once it exists.
        if settings_error() is None:
            autodiscover_modules("jobs")
        post_migrate.connect(upgrade_tables, sender=self, dispatch_uid="pgsched.upgrade_tables")


def upgrade_tables(sender: AppConfig, using: str, plan: Any = None, **kwargs: Any) -> None:
    """After every ``manage.py migrate`` of pgsched's database: pgsched's own migration, which
    applies what this version adds to tables an earlier one made (idempotent, under a lock, so
    safe while replicas run); the app's migration 0001 made them the first time."""
    from .conf import pgsched_alias

    if using == pgsched_alias() and settings_error() is None:
        project_scheduler().migrate()


def settings_error() -> ConfigError | None:
    try:
        project_scheduler()
    except ConfigError as exc:
        return exc
    return None


def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``manage.py check``: settings.PGSCHED and its database, as pgsched reads them."""
    error = settings_error()
    return [] if error is None else [checks.Error(str(error), id="pgsched.E001")]
