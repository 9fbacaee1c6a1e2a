"""DSN resolution and password redaction (a password never appears, as the README says)."""

from __future__ import annotations

import pytest

from pgsched._dsn import resolve_dsn
from pgsched._secrets import redact


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("postgresql://user:secret@host/db", "postgresql://user:***@host/db"),
        ("postgres://user:secret@host:5432/db", "postgres://user:***@host:5432/db"),
        ("postgresql://user:pa:ss/w@host/db", "postgresql://user:***@host/db"),
        ("postgresql://:secret@host/db", "postgresql://:***@host/db"),
        ("postgresql://user:secret@[::1]:5432/db", "postgresql://user:***@[::1]:5432/db"),
        ("POSTGRESQL://user:secret@host/db", "POSTGRESQL://user:***@host/db"),
        ("host=h password=secret dbname=d", "host=h password=*** dbname=d"),
        ("host=h password='se cret' dbname=d", "host=h password=*** dbname=d"),
        ("host=h password = 'se cret' dbname=d", "host=h password = *** dbname=d"),
        (r"host=h password='it\'s secret' dbname=d", "host=h password=*** dbname=d"),
        ("host=h PASSWORD=secret", "host=h PASSWORD=***"),
        ("postgresql://user@host/db?password=secret", "postgresql://user@host/db?password=***"),
    ],
)
def test_redact_forms(text: str, expected: str) -> None:
    assert redact(text) == expected
    assert "secret" not in redact(text)


def test_redact_inside_a_longer_exception_message() -> None:
    message = (
        'connection to server failed for DSN "postgresql://app:hunter2@db.internal:5432/prod": '
        "timeout; retried with 'host=db2 port=5432 user=app password=hunter3 sslmode=require'"
    )
    out = redact(message)
    assert "hunter2" not in out
    assert "hunter3" not in out
    assert "postgresql://app:***@db.internal:5432/prod" in out
    assert "password=*** sslmode=require" in out
    assert out.startswith("connection to server failed for DSN ")


def test_redact_every_occurrence() -> None:
    text = "a postgresql://u:one@h/d b postgresql://u:two@h/d c password=three d password=four"
    out = redact(text)
    for secret in ("one", "two", "three", "four"):
        assert secret not in out.replace("postgresql", "")
    assert out.count("***") == 4


@pytest.mark.parametrize(
    "text",
    [
        "postgresql://user@host:5432/db",
        "postgresql://host:5432/db",
        "host=h port=5432 user=app dbname=d",
        'password authentication failed for user "app"',
        "nothing to see here",
        "",
    ],
)
def test_redact_leaves_text_without_passwords_alone(text: str) -> None:
    assert redact(text) == text


def test_redact_backslash_escaped_space_in_unquoted_password() -> None:
    out = redact(r"host=h password=se\ cret dbname=d")
    assert "cret" not in out


def test_redact_sslpassword() -> None:
    assert "topsecret" not in redact("host=h sslpassword=topsecret sslcert=/c")


def test_resolve_dsn_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGSCHED_DSN", raising=False)
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert resolve_dsn(None) is None
    monkeypatch.setenv("DATABASE_URL", "postgresql://from-database-url/db")
    assert resolve_dsn(None) == "postgresql://from-database-url/db"
    monkeypatch.setenv("PGSCHED_DSN", "postgresql://from-pgsched-dsn/db")
    assert resolve_dsn(None) == "postgresql://from-pgsched-dsn/db"
    assert resolve_dsn("postgresql://explicit/db") == "postgresql://explicit/db"


def test_resolve_dsn_skips_empty_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGSCHED_DSN", "")
    monkeypatch.setenv("DATABASE_URL", "postgresql://fallback/db")
    assert resolve_dsn("") == "postgresql://fallback/db"
    monkeypatch.delenv("DATABASE_URL")
    assert resolve_dsn(None) is None


def test_scheduler_dsn_uses_the_same_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    import pgsched

    monkeypatch.setenv("PGSCHED_DSN", "postgresql://env/db")
    monkeypatch.setenv("DATABASE_URL", "postgresql://url/db")
    assert pgsched.Scheduler().dsn == "postgresql://env/db"
    assert pgsched.Scheduler(dsn="postgresql://explicit/db").dsn == "postgresql://explicit/db"
    monkeypatch.delenv("PGSCHED_DSN")
    assert pgsched.Scheduler().dsn == "postgresql://url/db"
