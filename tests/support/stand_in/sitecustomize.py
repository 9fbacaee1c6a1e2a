"""Put on the PYTHONPATH of the tests' subprocesses (``pgsched run`` replicas and commands)
by tests/conftest.py: with ``TESTS_FIRST_SIGHT_STAND_IN=1``, first sight in that process
takes a scope's newest due plan, as tests/support/sight.py does in the test process, for
tests written for a job whose current plan runs as soon as a replica starts. The module is
patched when pgsched imports it; nothing is imported before that."""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
from datetime import datetime, timedelta
from typing import Any

_MODULE = "pgsched._engine.sighting"


def newest_due_at_first_sight(job: Any, seen_at: datetime, lookback: timedelta) -> datetime | None:
    horizon = seen_at - job.schedule_delay
    plan: datetime | None = job.schedule.latest_at_or_before(horizon)
    return plan if plan is not None else job.schedule.next_after(horizon)


class _Patcher(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != _MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader: Any = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            module.first_plan = newest_due_at_first_sight

        loader.exec_module = exec_module
        return spec


if os.environ.get("TESTS_FIRST_SIGHT_STAND_IN") == "1":
    sys.meta_path.insert(0, _Patcher())
