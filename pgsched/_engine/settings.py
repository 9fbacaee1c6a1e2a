"""The settings of one replica's engine (what ``Scheduler`` passes to ``Runtime``): one frozen
value its collaborators read from.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from .._jobs.spec import NO_HOOKS, RunHooks
from .._run import RunTransaction
from .._storage.answering import ENGINE_ANSWER_TIMEOUT_S

# At most one registration statement per renewal interval on an idle tick (10 s unless
# configured); a short expiry (tests) refreshes at least three times within it.
RENEWAL_DEFAULT = timedelta(seconds=10)


@dataclass(frozen=True)
class ReplicaSettings:
    """How one replica runs (from its ``Scheduler``)."""

    schema: str
    runner_id: str
    max_concurrency: int
    tick_interval: timedelta
    shutdown_grace: timedelta
    conninfo: str
    app_name: str
    # Behind a transaction-pooling PgBouncer: no LISTEN (the tick wakes the replica), no
    # prepared statements, no session settings outside a transaction (docs/pgbouncer.md).
    transaction_pooling: bool = False
    # /healthz answers 503 once the tick loop or the writer has not succeeded for this long:
    # under 30 s, so a replica that has scheduled nothing for that long never looks healthy.
    health_timeout: timedelta = timedelta(seconds=20)
    # Claims and terminal writes wait for a synchronous standby (synchronous_commit = on).
    synchronous_claims: bool = False
    # The engine's statements get no longer than this for an answer (the pool's bound).
    answer_timeout: timedelta = timedelta(seconds=ENGINE_ANSWER_TIMEOUT_S)
    # An operator's statement (this replica's HTTP API) may run this long on the server.
    statement_timeout: timedelta = timedelta(seconds=30)
    # The replica's row in `replicas` is removed once not refreshed for this long (a replica
    # that died); short only in tests.
    replica_expiry: timedelta = timedelta(minutes=10)
    # The scheduler's on_failure / on_recovery, called for every job (docs/hooks.md).
    hooks: RunHooks = NO_HOOKS
    # How often the row is renewed: it shows the replica live for three of these.
    replica_renewal: timedelta = RENEWAL_DEFAULT
    # Where a sync transactional run's transaction comes from (Django's atomic()); None: a
    # connection of the run's own.
    run_transaction: RunTransaction | None = None
