"""Scopes, results and the run context handlers see (README, "Python API")."""

from __future__ import annotations

import inspect
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

import pgsched
from pgsched._run import Liveness, Run, watch
from pgsched._structures import GLOBAL, Scope


def test_scope_int_ids_become_text() -> None:
    s = Scope("tenant", 42)  # type: ignore[arg-type]
    assert s.id == "42"
    assert s == Scope("tenant", "42")
    assert hash(s) == hash(Scope("tenant", "42"))
    assert str(s) == "tenant:42"


def test_global_scope() -> None:
    assert Scope("global", "global") == GLOBAL
    assert pgsched.GLOBAL is GLOBAL


@pytest.mark.parametrize(
    ("kind", "ident"),
    [
        ("tenant", "a\x00b"),
        ("ten\x00ant", "a"),
        ("", "a"),
        ("tenant", ""),
        ("tenant", None),
        ("tenant", 1.5),
        ("tenant", True),
        (None, "a"),
    ],
)
def test_bad_scopes(kind: Any, ident: Any) -> None:
    with pytest.raises(pgsched.ConfigError) as info:
        Scope(kind, ident)
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("kind", "ident", "message"),
    [
        ("tenant", "a\nb", "Scope id='a\\nb' contains a control character (newline)"),
        ("tenant", "a\rb", "Scope id='a\\rb' contains a control character (carriage return)"),
        ("ten\tant", "a", "Scope kind='ten\\tant' contains a control character (tab)"),
        ("tenant", "\x9b", "Scope id='\\x9b' contains a control character (U+009B)"),
        ("tenant", "a\x00b", "Scope id='a\\x00b' contains a control character (NUL)"),
    ],
)
def test_control_characters_are_refused_naming_field_and_value(
    kind: str, ident: str, message: str
) -> None:
    with pytest.raises(pgsched.ConfigError) as info:
        Scope(kind, ident)
    assert str(info.value) == message


def test_scope_parse_names_the_job_when_given() -> None:
    with pytest.raises(pgsched.ConfigError) as info:
        Scope.parse("tenant:a\nb", "report")
    assert str(info.value) == (
        "job 'report': Scope id='a\\nb' contains a control character (newline)"
    )
    with pytest.raises(pgsched.ConfigError, match=r"^job 'report': scope 'x' is not of the form"):
        Scope.parse("x", "report")


def test_scope_parse() -> None:
    assert Scope.parse("tenant:a:b") == Scope("tenant", "a:b")
    assert Scope.parse("tenant:a:b").kind == "tenant"
    assert Scope.parse("tenant:a:b").id == "a:b"
    assert Scope.parse("global:global") == GLOBAL
    assert Scope.parse(str(Scope("region", "eu:west"))) == Scope("region", "eu:west")


@pytest.mark.parametrize("text", ["tenant", "tenant:", ":a", ":", "", "ten\x00ant:a"])
def test_scope_parse_bad_forms(text: str) -> None:
    with pytest.raises(pgsched.ConfigError):
        Scope.parse(text)


def test_scopes_order_and_hash() -> None:
    scopes = {Scope("t", "b"), Scope("t", "a"), Scope("t", "a")}
    assert sorted(scopes) == [Scope("t", "a"), Scope("t", "b")]


def make_run(**overrides: Any) -> Run:
    fields: dict[str, Any] = dict(
        job="rollup",
        scope=Scope("tenant", "1"),
        plan_time=datetime(2027, 1, 1, tzinfo=UTC),
        attempt=1,
        max_attempts=3,
        execution_id=uuid.uuid4(),
        lease_token=uuid.uuid4(),
        fencing_token=7,
        runner_id="r1",
        trigger="schedule",
        replica_log=None,
    )
    fields.update(overrides)
    return Run(**fields)


def watched(stale_timeout_s: float = 0.0, renewed_ago_s: float = 0.0) -> tuple[Run, Liveness]:
    run, liveness = make_run(), Liveness(stale_timeout_s)
    liveness._renewed_at = time.monotonic() - renewed_ago_s
    watch(run, liveness)
    return run, liveness


def test_run_takes_no_private_fields() -> None:
    init = inspect.signature(Run).parameters
    assert not [name for name in init if name.startswith("_")]
    assert make_run().payload == {}


def test_heartbeat_raises_lease_lost_after_mark_lost() -> None:
    run, liveness = watched()
    assert run.lease_lost is False
    run.heartbeat()  # holds the lease: no error
    assert liveness.mark_lost() is True
    assert liveness.mark_lost() is False  # counted once
    assert run.lease_lost is True
    with pytest.raises(pgsched.LeaseLost) as info:
        run.heartbeat()
    assert "rollup" in str(info.value)
    assert isinstance(info.value, pgsched.PgschedError)
    liveness.renewed()  # a late renewal does not resurrect a lost lease
    assert run.lease_lost is True


def test_lease_is_lost_when_not_renewed_within_stale_timeout() -> None:
    run, liveness = watched(stale_timeout_s=10.0, renewed_ago_s=11)
    assert run.lease_lost is True
    assert liveness.known_lost is False  # overdue, not known lost: a write may still hold
    with pytest.raises(pgsched.LeaseLost):
        run.heartbeat()
    liveness.renewed()
    assert run.lease_lost is False
    run.heartbeat()


def test_no_stale_timeout_means_no_silent_expiry() -> None:
    run, _ = watched(stale_timeout_s=0.0, renewed_ago_s=10_000)
    assert run.lease_lost is False


def test_result_defaults() -> None:
    r = pgsched.Result()
    assert r.rows_affected == 0
    assert r.data == {}
    assert pgsched.Result().data is not r.data
