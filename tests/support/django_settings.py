"""A minimal Django settings module: django-celery-beat's app, its database set by
:func:`tests.support.django_beat.django_beat_tables` (the suite's server and a schema of the
test's own, ``search_path`` in the database's ``OPTIONS``). No project, no views: only what
running django-celery-beat's own migrations and ORM needs."""

from __future__ import annotations

SECRET_KEY = "pgsched-tests-only"
INSTALLED_APPS = ["django_celery_beat"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        # Set from the test's DSN by django_beat_tables before the first query.
        "NAME": "postgres",
        "OPTIONS": {"options": "-c search_path=public"},
    }
}
