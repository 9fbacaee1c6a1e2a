"""``settings.PGSCHED`` and ``settings.DATABASES`` read into the project's ``Scheduler``
(docs/django.md). The functions on plain mappings take no Django state, so they can be
checked without a configured project."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from typing import Any

from .._dsn import conninfo_of
from .._errors import ConfigError
from .._scheduler import Scheduler

# The Scheduler's own options, as settings: its signature is the list. The DSN is not one of
# them: it comes from DATABASES.
_OPTIONS = {p.upper() for p in inspect.signature(Scheduler.__init__).parameters} - {"SELF", "DSN"}
SETTINGS = frozenset({"DATABASE", *_OPTIONS})

# What Django's postgresql backend takes from OPTIONS for itself, never handing it to libpq
# (django/db/backends/postgresql/base.py, get_connection_params).
_DJANGO_ONLY_OPTIONS = frozenset(
    {
        "assume_role",
        "isolation_level",
        "pool",
        "server_side_binding",
        "cursor_factory",
        "prepare_threshold",
        "context",
    }
)
# Django's fields that are libpq keywords, and the keyword each is (empty: not given).
_FIELDS = {"USER": "user", "PASSWORD": "password", "HOST": "host", "PORT": "port"}


def database_alias(pgsched: Mapping[str, Any]) -> str:
    alias = pgsched.get("DATABASE", "default")
    if not isinstance(alias, str) or not alias:
        raise ConfigError(f"PGSCHED['DATABASE']={alias!r} must name an alias of DATABASES")
    return alias


def database_dsn(alias: str, databases: Mapping[str, Mapping[str, Any]]) -> str:
    """The libpq DSN of ``DATABASES[alias]``, with the parameters Django's postgresql backend
    connects with: NAME (None: the ``postgres`` database, empty: whatever OPTIONS' service
    says), USER, PASSWORD, HOST (empty: the local socket), PORT and the libpq OPTIONS."""
    if alias not in databases:
        raise ConfigError(f"PGSCHED['DATABASE']={alias!r} is not an alias of DATABASES")
    database = databases[alias]
    engine = str(database.get("ENGINE", ""))
    if "postgresql" not in engine and "postgis" not in engine:
        raise ConfigError(
            f"DATABASES[{alias!r}] has ENGINE {engine!r}: pgsched needs a PostgreSQL database"
            " (django.db.backends.postgresql); set PGSCHED['DATABASE'] to one"
        )
    options = dict(database.get("OPTIONS") or {})
    params: dict[str, Any] = {}
    name = database.get("NAME")
    if name is None:
        options.pop("service", None)  # as Django does: None is the postgres database itself
        params["dbname"] = "postgres"
    elif name:
        params["dbname"] = name
    params.update((k, v) for k, v in options.items() if k not in _DJANGO_ONLY_OPTIONS)
    params.update((kw, database[field]) for field, kw in _FIELDS.items() if database.get(field))
    text = {k: str(v) for k, v in params.items() if v is not None}
    return conninfo_of(text, source=f"DATABASES[{alias!r}]")


def scheduler_options(
    pgsched: Mapping[str, Any], databases: Mapping[str, Mapping[str, Any]]
) -> dict[str, Any]:
    """The keyword arguments of the project's ``Scheduler``; an unknown key of ``PGSCHED``
    is a :class:`ConfigError` naming it."""
    if not isinstance(pgsched, Mapping):
        raise ConfigError(f"settings.PGSCHED must be a dict, not {type(pgsched).__name__}")
    for key in pgsched:
        if key not in SETTINGS:
            raise ConfigError(
                f"settings.PGSCHED has an unknown key {key!r}"
                f" (known: {', '.join(sorted(SETTINGS))})"
            )
    options = {key.lower(): value for key, value in pgsched.items() if key in _OPTIONS}
    options["dsn"] = database_dsn(database_alias(pgsched), databases)
    return options


def project_settings() -> tuple[Mapping[str, Any], Mapping[str, Mapping[str, Any]]]:
    """``settings.PGSCHED`` (empty if unset) and ``settings.DATABASES``."""
    from django.conf import settings

    return getattr(settings, "PGSCHED", {}), settings.DATABASES


def pgsched_alias() -> str:
    """The alias of ``DATABASES`` whose database has pgsched's tables."""
    return database_alias(project_settings()[0])


@functools.cache
def project_scheduler() -> Scheduler:
    """The project's one ``Scheduler``, built from the settings on first use (cached only
    once built: a settings error is raised again on every use)."""
    from .runs import DjangoScheduler  # Django's ORM: imported once the settings are read

    pgsched, databases = project_settings()
    return DjangoScheduler(database_alias(pgsched), **scheduler_options(pgsched, databases))
