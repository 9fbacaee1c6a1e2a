"""A small Django project using pgsched.django (tests/acceptance/django): its database is the
tests' server (PGSCHED_TEST_DSN), Django's tables and pgsched's in the test's own schema
(PGSCHED_TEST_SCHEMA); PGSCHED_TEST_PASSWORD, if set, is the database's PASSWORD."""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

_DSN = conninfo_to_dict(os.environ["PGSCHED_TEST_DSN"])
_SCHEMA = os.environ["PGSCHED_TEST_SCHEMA"]

SECRET_KEY = "pgsched-tests-only"
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "pgsched.django",
    "shop",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
ROOT_URLCONF = "site_settings.urls"
WSGI_APPLICATION = "site_settings.wsgi.application"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
LOGIN_URL = "/admin/login/"
STATIC_URL = "static/"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _DSN.get("dbname", "postgres"),
        "USER": _DSN.get("user", ""),
        "PASSWORD": os.environ.get("PGSCHED_TEST_PASSWORD", _DSN.get("password", "")),
        "HOST": _DSN.get("host", ""),
        "PORT": _DSN.get("port", ""),
        # Django's own tables (django_migrations) in the test's schema too, not the server's
        # public one the other tests share.
        "OPTIONS": {"options": f"-c search_path={_SCHEMA}", "application_name": "shop"},
    }
}
PGSCHED = {"SCHEMA": _SCHEMA, "TICK_INTERVAL": "0.5s", "SHUTDOWN_GRACE": "5s"}
