"""synchronous_claims reaches the replica from the Scheduler argument, the environment and the
command line (no database needed)."""

from __future__ import annotations

import pytest

import pgsched
from pgsched._cli.main import _parser
from pgsched._dsn import resolve_synchronous_claims
from pgsched._errors import ConfigError

DSN = "postgresql://u@127.0.0.1:1/db"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("1", True), ("true", True), ("ON", True), (" yes ", True), ("0", False), ("off", False)],
)
def test_the_environment_variable_sets_the_default(
    monkeypatch: pytest.MonkeyPatch, raw: str, expected: bool
) -> None:
    monkeypatch.setenv("PGSCHED_SYNCHRONOUS_CLAIMS", raw)
    assert resolve_synchronous_claims(None) is expected
    assert pgsched.Scheduler(DSN).synchronous_claims is expected


def test_off_by_default_and_the_argument_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGSCHED_SYNCHRONOUS_CLAIMS", raising=False)
    assert pgsched.Scheduler(DSN).synchronous_claims is False
    assert pgsched.Scheduler(DSN, synchronous_claims=True).synchronous_claims is True
    monkeypatch.setenv("PGSCHED_SYNCHRONOUS_CLAIMS", "1")
    assert pgsched.Scheduler(DSN, synchronous_claims=False).synchronous_claims is False


def test_bad_values_are_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGSCHED_SYNCHRONOUS_CLAIMS", "maybe")
    with pytest.raises(ConfigError, match="PGSCHED_SYNCHRONOUS_CLAIMS='maybe'"):
        pgsched.Scheduler(DSN)
    with pytest.raises(ConfigError, match="synchronous_claims='yes' must be True or False"):
        pgsched.Scheduler(DSN, synchronous_claims="yes")  # type: ignore[arg-type]


def test_configure_sets_it_and_leaves_it_when_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PGSCHED_SYNCHRONOUS_CLAIMS", raising=False)
    s = pgsched.Scheduler(DSN)
    s.configure(synchronous_claims=True)
    assert s.synchronous_claims is True
    s.configure(schema="other")
    assert s.synchronous_claims is True


def test_run_has_a_synchronous_claims_flag() -> None:
    args = _parser().parse_args(["run", "app.py", "--synchronous-claims"])
    assert args.synchronous_claims is True
    assert _parser().parse_args(["run", "app.py"]).synchronous_claims is False
