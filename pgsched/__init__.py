"""pgsched: periodic jobs run once per plan across many replicas, coordinated by PostgreSQL."""

from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ._errors import (
    AppLoadError,
    ConfigError,
    DatabaseError,
    LeaseLost,
    NotFoundError,
    PgschedError,
    RunAbandoned,
    RunFailed,
    RunTimeout,
    StaleLease,
    UnstorableResult,
)
from ._facades.admin import Admin
from ._facades.aio import AsyncAdmin
from ._jobs.spec import JobOptions, JobSpec
from ._planning.calendars import Calendar, working_day
from ._planning.recurrence import Planner
from ._run import Batch, Run
from ._scheduler import Scheduler
from ._structures import (
    GLOBAL,
    Attempt,
    Execution,
    ExplainLine,
    Explanation,
    FailedAttempt,
    JobStatus,
    LiveReplica,
    Result,
    RunHistory,
    Schedule,
    ScheduleSpec,
    Scope,
    TickReport,
    Triggered,
)
from ._telemetry.logs import configure_logging


def dashboard_asgi(
    admin: AsyncAdmin,
    *,
    token: str | None = None,
    view_token: str | None = None,
    allowed_hosts: Sequence[str] | str | None = None,
) -> Any:
    """The dashboard as an ASGI application over ``admin``: ``app.mount("/pgsched", it)`` in
    FastAPI or Starlette. ``token`` / ``view_token`` default to ``PGSCHED_HTTP_TOKEN`` /
    ``PGSCHED_HTTP_VIEW_TOKEN``, read at each request. ``allowed_hosts``: the names or public
    origins (``https://ops.example.com``) browsers reach the application by, beyond the
    address its server listens on (and ``PGSCHED_HTTP_ALLOWED_HOSTS``): a signed-in browser
    naming another host is refused."""
    from ._facades.http.auth import Tokens
    from ._facades.http.mount import ASGIDashboard

    fixed = Tokens.from_env(token, view_token) if token or view_token else None
    return ASGIDashboard(admin, tokens=fixed, allowed_hosts=allowed_hosts)


def dashboard_aiohttp(
    admin: AsyncAdmin,
    *,
    token: str | None = None,
    view_token: str | None = None,
    allowed_hosts: Sequence[str] | str | None = None,
) -> Any:
    """The dashboard as an aiohttp application over ``admin``:
    ``app.add_subapp("/pgsched/", it)``. Tokens and hosts as for :func:`dashboard_asgi`."""
    from ._facades.http.auth import Tokens
    from ._facades.http.mount import aiohttp_app

    fixed = Tokens.from_env(token, view_token) if token or view_token else None
    return aiohttp_app(admin, tokens=fixed, allowed_hosts=allowed_hosts)


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
    "Batch",
    "Calendar",
    "ConfigError",
    "DatabaseError",
    "Execution",
    "ExplainLine",
    "Explanation",
    "FailedAttempt",
    "JobOptions",
    "JobSpec",
    "JobStatus",
    "LeaseLost",
    "LiveReplica",
    "NotFoundError",
    "PgschedError",
    "Planner",
    "Result",
    "Run",
    "RunAbandoned",
    "RunFailed",
    "RunHistory",
    "RunTimeout",
    "Schedule",
    "ScheduleSpec",
    "Scheduler",
    "Scope",
    "StaleLease",
    "TickReport",
    "Triggered",
    "UnstorableResult",
    "__version__",
    "configure_logging",
    "dashboard_aiohttp",
    "dashboard_asgi",
    "working_day",
]
