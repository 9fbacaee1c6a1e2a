"""How an attempt reads in the command line's and the dashboard's tables."""

from __future__ import annotations

from pgsched._structures import attempt_text


def test_an_attempt_past_max_attempts_says_a_crash_gave_it() -> None:
    assert attempt_text(1, 3) == "1/3"
    assert attempt_text(3, 3) == "3/3"
    # only a steal after a dead holder takes a row past max_attempts, by one
    assert attempt_text(2, 1) == "2/1 (+1 after a crash)"
