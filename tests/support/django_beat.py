"""django-celery-beat's tables made as its migrations make them, in a schema of the test's
own, and its models to write rows through the ORM (the importer's tests; a Django project is
not needed, only :mod:`tests.support.django_settings`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def source_dsn(dsn: str, schema: str) -> str:
    """``dsn`` with ``schema`` as its search_path: where the importer finds the tables."""
    options = f"-c search_path={schema}"
    return make_conninfo(dsn, options=options) if conninfo_to_dict(dsn) else dsn


@contextmanager
def django_beat_tables(dsn: str, schema: str) -> Iterator[ModuleType]:
    """Create ``schema``, run django-celery-beat's migrations into it and yield its models
    module; the schema is dropped afterwards. Django is set up once per process; each use
    points its connection at a schema of its own."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.django_settings")
    import django
    from django.core.management import call_command
    from django.db import connection

    django.setup()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    connection.close()
    # The connection goes where ``dsn`` points (the suite's server: the embedded one in CI,
    # not the environment's), in the test's schema.
    params = conninfo_to_dict(dsn)
    connection.settings_dict.update(
        NAME=params.get("dbname", "postgres"),
        USER=params.get("user", ""),
        PASSWORD=params.get("password", ""),
        HOST=params.get("host", ""),
        PORT=params.get("port", ""),
    )
    connection.settings_dict["OPTIONS"]["options"] = f"-c search_path={schema}"
    try:
        call_command("migrate", "django_celery_beat", verbosity=0)
        from django_celery_beat import models

        yield models
    finally:
        connection.close()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))
