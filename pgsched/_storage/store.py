"""The store of one schema: every subject's statements in one object, for the collaborators
that use several (the replica's engine, the operations core)."""

from __future__ import annotations

from .jobs import JobStatements
from .leases import LeaseStatements
from .operator import OperatorStatements
from .schema import SchemaStatements
from .session import SessionStatements


class Store(
    SchemaStatements, JobStatements, OperatorStatements, LeaseStatements, SessionStatements
):
    """Statements against one schema; every method takes the connection to use."""
