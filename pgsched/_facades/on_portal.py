"""The bases of the generated blocking methods (``sync_operations``, written by
tools/gen_admin.py): they run the operations core's coroutines on the portal's loop, and a
class that mirrors a class of the core takes each method's docstring from its coroutine."""

from __future__ import annotations

from typing import Any

from .._jobs.spec import JobSpec
from .._operations.core import Operations


class OnPortal:
    """Runs the operations core's coroutines on the portal's loop."""

    def __init_subclass__(cls, mirrors: type | None = None, **kwargs: Any) -> None:
        """A class that ``mirrors`` a class of the core takes each method's docstring from
        the coroutine it runs."""
        super().__init_subclass__(**kwargs)
        if mirrors is not None:
            for name, member in vars(cls).items():
                if callable(member) and not name.startswith("_"):
                    member.__doc__ = getattr(mirrors, name).__doc__

    def _core(self) -> Operations:
        """The operations core the methods call."""
        raise NotImplementedError

    def _check_job(self, job: str) -> None:
        """Before a shortcut's call on ``job``: nothing for ``Admin`` (the core answers for
        a job no replica registered)."""


class OnScheduler(OnPortal):
    """The shortcuts of a ``Scheduler``: those on one job first check it registered the job."""

    def _job(self, name: str) -> JobSpec:
        """The registered job ``name``, else ``NotFoundError``."""
        raise NotImplementedError

    def _check_job(self, job: str) -> None:
        self._job(job)
