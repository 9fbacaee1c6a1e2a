"""pgsched as a Django app: ``INSTALLED_APPS += ["pgsched.django"]`` (docs/django.md). Needs
the ``django`` extra (``pip install "pgsched[django]"``).

``pgsched.django.scheduler`` is the project's one ``Scheduler``, built from
``settings.PGSCHED`` and ``settings.DATABASES`` on first use, so an app's ``jobs.py`` can
import it while the apps load; every installed app's ``jobs.py`` is imported once they have.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .._scheduler import Scheduler

__all__ = ["scheduler"]


def __getattr__(name: str) -> Scheduler:
    # Built on first use, not at import: INSTALLED_APPS imports this package before the
    # settings could be read in every project.
    if name == "scheduler":
        from .conf import project_scheduler

        return project_scheduler()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
