"""settings.PGSCHED and DATABASES as pgsched.django reads them: the DSN Django's postgresql
backend would connect with, and one-line errors for what pgsched cannot use."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict

from pgsched import ConfigError, Scheduler
from pgsched._secrets import redact
from pgsched.django.conf import SETTINGS, database_dsn, scheduler_options

POSTGRES = "django.db.backends.postgresql"


def dsn_fields(database: dict[str, Any], alias: str = "default") -> dict[str, Any]:
    return dict(conninfo_to_dict(database_dsn(alias, {alias: database})))


def test_every_field_and_libpq_option_reaches_the_dsn() -> None:
    fields = dsn_fields(
        {
            "ENGINE": POSTGRES,
            "NAME": "shop",
            "USER": "clerk",
            "PASSWORD": "pw with 'quotes' and spaces",
            "HOST": "db.internal",
            "PORT": 6432,
            "OPTIONS": {
                "sslmode": "verify-full",
                "sslrootcert": "/etc/ssl/root.crt",
                "connect_timeout": 5,
                "options": "-c search_path=shop",
                # Django's own, never libpq's:
                "isolation_level": 2,
                "pool": {"min_size": 2},
                "server_side_binding": True,
                "prepare_threshold": None,
                "assume_role": "owner",
            },
        }
    )
    assert fields == {
        "dbname": "shop",
        "user": "clerk",
        "password": "pw with 'quotes' and spaces",
        "host": "db.internal",
        "port": "6432",
        "sslmode": "verify-full",
        "sslrootcert": "/etc/ssl/root.crt",
        "connect_timeout": "5",
        "options": "-c search_path=shop",
    }


def test_empty_fields_are_libpq_defaults_socket_and_service() -> None:
    # No HOST: libpq's default socket; NAME "" with a service: the service file's database.
    fields = dsn_fields(
        {
            "ENGINE": POSTGRES,
            "NAME": "",
            "USER": "",
            "PASSWORD": "",
            "HOST": "",
            "PORT": "",
            "OPTIONS": {"service": "shop", "passfile": "/run/secrets/pgpass"},
        }
    )
    assert fields == {"service": "shop", "passfile": "/run/secrets/pgpass"}
    assert dsn_fields({"ENGINE": POSTGRES, "HOST": "/var/run/postgresql", "NAME": "x"}) == {
        "dbname": "x",
        "host": "/var/run/postgresql",
    }


def test_name_none_is_the_postgres_database_without_the_service() -> None:
    fields = dsn_fields({"ENGINE": POSTGRES, "NAME": None, "OPTIONS": {"service": "shop"}})
    assert fields == {"dbname": "postgres"}


def test_postgis_is_postgresql() -> None:
    fields = dsn_fields({"ENGINE": "django.contrib.gis.db.backends.postgis", "NAME": "geo"})
    assert fields == {"dbname": "geo"}


def test_the_password_is_redacted_wherever_it_appears() -> None:
    dsn = database_dsn("default", {"default": {"ENGINE": POSTGRES, "PASSWORD": "s3cr3t-pw"}})
    assert "s3cr3t-pw" in dsn
    assert "s3cr3t-pw" not in redact(f"connecting to {dsn}; and again: s3cr3t-pw")


def one_line_error(pgsched: dict[str, Any], databases: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        scheduler_options(pgsched, databases)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_a_database_that_is_not_postgresql_is_one_line_naming_alias_and_engine() -> None:
    message = one_line_error(
        {"DATABASE": "legacy"},
        {
            "default": {"ENGINE": POSTGRES, "NAME": "x"},
            "legacy": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"},
        },
    )
    assert "'legacy'" in message
    assert "django.db.backends.sqlite3" in message


def test_an_alias_not_in_databases_is_one_line() -> None:
    message = one_line_error({"DATABASE": "other"}, {"default": {"ENGINE": POSTGRES}})
    assert "'other'" in message


def test_an_unknown_key_is_one_line_naming_it() -> None:
    message = one_line_error({"TICK_INTERVALL": "1s"}, {"default": {"ENGINE": POSTGRES}})
    assert "'TICK_INTERVALL'" in message


def test_an_option_libpq_does_not_know_is_one_line_naming_the_alias() -> None:
    message = one_line_error(
        {}, {"default": {"ENGINE": POSTGRES, "PASSWORD": "hunter22", "OPTIONS": {"sslmod": "x"}}}
    )
    assert "DATABASES['default']" in message
    assert "sslmod" in message
    assert "hunter22" not in message


def test_the_settings_are_the_scheduler_signature_in_upper_case() -> None:
    parameters = set(inspect.signature(Scheduler.__init__).parameters) - {"self", "dsn"}
    assert {name.upper() for name in parameters} | {"DATABASE"} == SETTINGS


def test_docs_list_every_setting() -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "django.md").read_text()
    _, _, table = docs.partition("## Settings")
    listed = set(re.findall(r"`([A-Z][A-Z_]+)`", table.split("\n## ", 1)[0]))
    assert SETTINGS - listed == set(), "settings missing from docs/django.md"


def test_settings_become_the_scheduler_options() -> None:
    options = scheduler_options(
        {"DATABASE": "jobs", "SCHEMA": "shop_jobs", "TICK_INTERVAL": "2s", "MAX_CONCURRENCY": 3},
        {"jobs": {"ENGINE": POSTGRES, "NAME": "jobs", "HOST": "h"}},
    )
    dsn = options.pop("dsn")
    assert conninfo_to_dict(dsn) == {"dbname": "jobs", "host": "h"}
    assert options == {"schema": "shop_jobs", "tick_interval": "2s", "max_concurrency": 3}
    scheduler = Scheduler(dsn=dsn, **options)
    assert (scheduler.schema, scheduler.max_concurrency) == ("shop_jobs", 3)
