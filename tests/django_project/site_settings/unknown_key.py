"""The project with a misspelt PGSCHED key."""

from .settings import *  # noqa: F403
from .settings import PGSCHED

PGSCHED = {**PGSCHED, "TICK_INTERVALL": "1s"}
