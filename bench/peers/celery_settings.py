"""Django settings of the django-celery-beat peer: its tables in the trial's database."""

from __future__ import annotations

import os
from urllib.parse import urlsplit

_dsn = urlsplit(os.environ["BENCH_DSN"])

SECRET_KEY = "bench-only"  # a throw-away Django project, no HTTP
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_celery_beat"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _dsn.path.lstrip("/"),
        "USER": _dsn.username or "postgres",
        "PASSWORD": _dsn.password or "",
        "HOST": _dsn.hostname or "127.0.0.1",
        "PORT": str(_dsn.port or 5432),
        "CONN_MAX_AGE": None,
    }
}
DJANGO_CELERY_BEAT_TZ_AWARE = True
