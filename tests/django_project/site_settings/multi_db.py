"""The project with pgsched on a second alias, "jobs": the same server, its Django tables in a
schema of their own (PGSCHED_TEST_SCHEMA with "_jobs" after it)."""

from .settings import *  # noqa: F403
from .settings import _SCHEMA, DATABASES, PGSCHED

DATABASES = {
    **DATABASES,
    "jobs": {**DATABASES["default"], "OPTIONS": {"options": f"-c search_path={_SCHEMA}_jobs"}},
}
PGSCHED = {**PGSCHED, "DATABASE": "jobs"}
