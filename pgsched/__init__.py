"""pgsched: periodic jobs run once per plan across many replicas, coordinated by PostgreSQL."""

from importlib.metadata import PackageNotFoundError, version

from ._admin import Admin
from ._aio import AsyncAdmin
from ._config import JobSpec
from ._engine.values import TickReport
from ._errors import (
    AppLoadError,
    ConfigError,
    DatabaseError,
    LeaseLost,
    NotFoundError,
    PgschedError,
)
from ._logging import configure_logging
from ._model import GLOBAL, Result, Scope
from ._planning.recurrence import Planner
from ._planning.schedules import Schedule, ScheduleSpec
from ._run import Run
from ._scheduler import Scheduler
from ._views import Attempt, Execution, FailedAttempt, JobStatus, RunHistory, Triggered

try:
    __version__ = version("pgsched")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

__all__ = [
    "GLOBAL",
    "Admin",
    "AppLoadError",
    "AsyncAdmin",
    "Attempt",
    "ConfigError",
    "DatabaseError",
    "Execution",
    "FailedAttempt",
    "JobSpec",
    "JobStatus",
    "LeaseLost",
    "NotFoundError",
    "PgschedError",
    "Planner",
    "Result",
    "Run",
    "RunHistory",
    "Schedule",
    "ScheduleSpec",
    "Scheduler",
    "Scope",
    "TickReport",
    "Triggered",
    "__version__",
    "configure_logging",
]
