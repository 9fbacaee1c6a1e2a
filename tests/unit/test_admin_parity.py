"""``Admin`` and ``AsyncAdmin`` are two facades over one operations core: the same operator
methods, with the same parameters and the same return types (one blocking, one a coroutine)."""

from __future__ import annotations

import inspect
import typing

import pgsched
from pgsched._operations.core import Operations

# Lifecycle differs by nature: close() for the blocking one, open()/aclose() for the pool.
LIFECYCLE = {"close", "open", "aclose", "operations", "dsn", "schema"}


def _operator_methods(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n))} - LIFECYCLE


def test_admin_and_async_admin_offer_the_same_operations() -> None:
    ops = _operator_methods(Operations)
    assert _operator_methods(pgsched.Admin) == ops
    assert _operator_methods(pgsched.AsyncAdmin) == ops


def test_they_take_the_same_parameters_and_return_the_same_types() -> None:
    for name in _operator_methods(Operations):
        blocking = inspect.signature(getattr(pgsched.Admin, name))
        coroutine = inspect.signature(getattr(pgsched.AsyncAdmin, name))
        assert list(blocking.parameters) == list(coroutine.parameters), name
        hints_b = typing.get_type_hints(getattr(pgsched.Admin, name))
        hints_c = typing.get_type_hints(getattr(pgsched.AsyncAdmin, name))
        assert hints_b.get("return") == hints_c.get("return"), name


def test_trigger_returns_triggered_on_both() -> None:
    for cls in (pgsched.Admin, pgsched.AsyncAdmin):
        hints = typing.get_type_hints(cls.trigger)
        assert hints["return"] == pgsched.Triggered | list[pgsched.Triggered], cls
