"""Connection settings built in one place, and which errors mean "database unavailable"."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import PoolTimeout

from pgsched._storage.connection import (
    LIBPQ_DEFAULTS,
    Backoff,
    DatabaseNotWritable,
    connect_options,
    hosts,
    not_writable,
    unavailable,
)
from pgsched._storage.servers import ServerWatch


def test_libpq_defaults_fill_what_the_dsn_leaves_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    options = connect_options("host=db dbname=x", "pgsched r1", transaction_pooling=False)
    assert {k: options[k] for k in LIBPQ_DEFAULTS} == {
        "connect_timeout": "5",
        "keepalives": "1",
        "keepalives_idle": "5",
        "keepalives_interval": "2",
        "keepalives_count": "3",
        "tcp_user_timeout": "10000",
    }
    assert options["autocommit"] is True
    assert options["application_name"] == "pgsched r1"
    assert options["prepare_threshold"] == 5


def test_the_dsn_and_the_environment_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "9")
    dsn = "postgresql://u:secret@db/x?keepalives_idle=60&keepalives=0"
    options = connect_options(dsn, "a", transaction_pooling=True)
    assert "connect_timeout" not in options  # libpq reads PGCONNECT_TIMEOUT itself
    assert "keepalives_idle" not in options and "keepalives" not in options
    assert options["keepalives_count"] == "3"
    assert options["prepare_threshold"] is None


def test_hosts_lists_every_server_and_no_password() -> None:
    dsn = "host=a,b port=5432,5433 user=u password=hunter2 target_session_attrs=read-write"
    assert hosts(dsn) == "a:5432,b:5433"
    assert hosts("postgresql://u:hunter2@a:6432,b/x") == "a:6432,b"
    assert hosts(lambda: "host=a") == "?"


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.OperationalError("server closed the connection unexpectedly"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"),
        psycopg.InterfaceError("the connection is closed"),
        PoolTimeout("couldn't get a connection after 5.00 sec"),
        DatabaseNotWritable("the server is in recovery"),
        TimeoutError(),
    ],
)
def test_database_unavailable_is_retried(exc: Exception) -> None:
    assert unavailable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        psycopg.errors.CheckViolation("new row violates check constraint"),
        psycopg.errors.UntranslatableCharacter("unsupported Unicode escape sequence"),
        psycopg.DataError("invalid input syntax"),
        psycopg.errors.ProgramLimitExceeded("index row size exceeds maximum"),
        ValueError("a bug"),
    ],
)
def test_a_statement_error_is_not_retried(exc: Exception) -> None:
    assert not unavailable(exc)


def test_only_a_read_only_server_discards_the_connection() -> None:
    assert not_writable(psycopg.errors.ReadOnlySqlTransaction("read-only"))
    assert not_writable(DatabaseNotWritable("in recovery"))
    assert not not_writable(psycopg.OperationalError("server closed the connection"))


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    backoff = Backoff()
    assert [backoff.delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    assert backoff.failures == 6
    backoff.reset()
    assert (backoff.delay(), backoff.failures) == (0.5, 1)


def test_steering_moves_an_avoided_host_last_and_keeps_the_others_in_order() -> None:
    watch = ServerWatch()
    dsn = "host=a,b,c port=5432,5433,5434 dbname=app target_session_attrs=read-write"
    assert watch.steer(dsn) == dsn
    watch.avoid("a:5432")
    steered = conninfo_to_dict(watch.steer(dsn))
    assert steered["host"] == "b,c,a"
    assert steered["port"] == "5433,5434,5432"
    assert steered["target_session_attrs"] == "read-write"


def test_steering_leaves_a_single_host_alone() -> None:
    watch = ServerWatch()
    watch.avoid("a:5432")
    assert watch.steer("host=a port=5432 dbname=app") == "host=a port=5432 dbname=app"


def test_a_host_a_new_connection_reached_is_no_longer_avoided() -> None:
    watch = ServerWatch()
    dsn = "host=a,b port=5432,5433 dbname=app target_session_attrs=read-write"
    watch.avoid("a:5432")
    assert watch.gives_way("a:5432", dsn)  # a pooled connection to it is dropped unused
    watch.answered("a:5432")  # a new one, steered to b first, came to a: a is the server now
    assert watch.steer(dsn) == dsn
    assert not watch.gives_way("a:5432", dsn)
