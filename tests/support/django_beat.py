"""django-celery-beat's tables made as its migrations make them (once per process), in a
schema of the test's own, and its models to write rows through the ORM (the importer's
tests; a Django project is not needed, only :mod:`tests.support.django_settings`)."""

from __future__ import annotations

import atexit
import contextlib
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def source_dsn(dsn: str, schema: str) -> str:
    """``dsn`` with ``schema`` as its search_path: where the importer finds the tables."""
    options = f"-c search_path={schema}"
    return make_conninfo(dsn, options=options) if conninfo_to_dict(dsn) else dsn


_TEMPLATE = f"dj_{uuid.uuid4().hex[:12]}"  # this process's migrated tables, between uses
_migrated = False


@contextmanager
def django_beat_tables(dsn: str, schema: str) -> Iterator[ModuleType]:
    """django-celery-beat's tables, made by its own migrations, in ``schema``; yields its
    models module, and the tables' rows go afterwards. Django is set up and its migrations
    run once per process (some 20 s under load), into a schema that each use renames to
    ``schema`` and back, emptied."""
    global _migrated
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.django_settings")
    import django
    from django.core.management import call_command
    from django.db import connection

    django.setup()
    if not _migrated:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(_TEMPLATE)))
        _point(connection, dsn, _TEMPLATE)
        call_command("migrate", "django_celery_beat", verbosity=0)
        connection.close()
        _migrated = True
        atexit.register(_drop, dsn)
    _rename(dsn, _TEMPLATE, schema)
    _point(connection, dsn, schema)
    try:
        from django_celery_beat import models

        yield models
    finally:
        connection.close()
        _empty(dsn, schema)
        _rename(dsn, schema, _TEMPLATE)


def _point(connection: Any, dsn: str, schema: str) -> None:
    """Django's connection where ``dsn`` points (the suite's server: the embedded one in CI,
    not the environment's), in ``schema``."""
    connection.close()
    params = conninfo_to_dict(dsn)
    connection.settings_dict.update(
        NAME=params.get("dbname", "postgres"),
        USER=params.get("user", ""),
        PASSWORD=params.get("password", ""),
        HOST=params.get("host", ""),
        PORT=params.get("port", ""),
    )
    connection.settings_dict["OPTIONS"]["options"] = f"-c search_path={schema}"


def _rename(dsn: str, old: str, new: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rename = sql.SQL("ALTER SCHEMA {} RENAME TO {}")
        conn.execute(rename.format(sql.Identifier(old), sql.Identifier(new)))


def _empty(dsn: str, schema: str) -> None:
    """Every row a use wrote gone, the ids restarted: the next use finds the tables as the
    migrations left them (Django's own record of them, django_migrations, kept)."""
    query = (
        "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename <> 'django_migrations'"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        tables = [row[0] for row in conn.execute(query, (schema,)).fetchall()]
        if tables:
            names = sql.SQL(", ").join(sql.Identifier(schema, name) for name in tables)
            conn.execute(sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(names))


def _drop(dsn: str) -> None:
    # At the process's exit: the embedded server may be gone already.
    with (
        contextlib.suppress(psycopg.Error),
        psycopg.connect(dsn, autocommit=True, connect_timeout=3) as conn,
    ):
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(_TEMPLATE)))
