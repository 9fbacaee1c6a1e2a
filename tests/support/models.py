"""Hypothesis state machines against a real database: each model test runs the same step
sequences in every run, so a failure replays as it happened."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine


class DatabaseMachine(RuleBasedStateMachine):
    """A state machine over the test's database: ``run_model`` sets these from its fixtures."""

    make_scheduler: Any = None
    db: Any = None
    schema = ""


def run_model(
    machine: type[DatabaseMachine], *, examples: int, steps: int, **fixtures: Any
) -> None:
    """Run ``machine`` for ``examples`` sequences of up to ``steps`` steps, with the test's
    ``fixtures`` set on the class (a function as a ``staticmethod``)."""
    for name, value in fixtures.items():
        setattr(machine, name, staticmethod(value) if callable(value) else value)
    machine.TestCase.settings = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    machine.TestCase().runTest()
