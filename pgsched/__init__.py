"""pgsched: periodic jobs run once per plan across many replicas, coordinated by PostgreSQL."""

from ._admin import Admin
from ._config import JobSpec
from ._errors import AppLoadError, ConfigError, LeaseLost, NotFoundError, PgschedError
from ._logging import configure_logging
from ._model import GLOBAL, Result, Run, Scope
from ._planning import Planner
from ._recorder import TickReport
from ._scheduler import Scheduler

__version__ = "0.1.0"

__all__ = [
    "GLOBAL",
    "Admin",
    "AppLoadError",
    "ConfigError",
    "JobSpec",
    "LeaseLost",
    "NotFoundError",
    "PgschedError",
    "Planner",
    "Result",
    "Run",
    "Scheduler",
    "Scope",
    "TickReport",
    "__version__",
    "configure_logging",
]
