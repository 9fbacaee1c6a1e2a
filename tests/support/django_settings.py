"""A minimal Django settings module: django-celery-beat's app on the test PostgreSQL
(``PGSCHED_TEST_DSN``), in the schema :func:`tests.support.django_beat.django_beat_tables`
points the connection at (``search_path`` in the database's ``OPTIONS``). No project, no
views: only what running django-celery-beat's own migrations and ORM needs."""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

_DSN = conninfo_to_dict(os.environ.get("PGSCHED_TEST_DSN", "postgresql://postgres@127.0.0.1/test"))

SECRET_KEY = "pgsched-tests-only"
INSTALLED_APPS = ["django_celery_beat"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _DSN.get("dbname", "postgres"),
        "USER": _DSN.get("user", "postgres"),
        "PASSWORD": _DSN.get("password", ""),
        "HOST": _DSN.get("host", "127.0.0.1"),
        "PORT": _DSN.get("port", "5432"),
        "OPTIONS": {"options": "-c search_path=public"},
    }
}
