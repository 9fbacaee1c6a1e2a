"""The compared schedulers: one class each behind :class:`Contender`, listed in
:data:`bench.registry.REGISTRY`.

The registry's order is the table's and the chart's; ``--schedulers`` and the results JSON
use the keys. A contender knows how to set up its schema in a fresh database, how to mark a
plan as already run (as a previous run of it would have left it), how to start one replica,
and which numbers of its own its replicas' counters carry. Standard library only at import:
the chart reads the labels from the peers' virtualenv.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from bench.shared import JOB, line, peer_setup
from bench.workloads import Workload

if TYPE_CHECKING:
    import psycopg


class Contender(Protocol):
    key: str  # in --schedulers and the results JSON
    label: str  # in the table and the chart's legend
    style: Mapping[str, Any]  # the chart's line (matplotlib keyword arguments)
    third_party: bool  # runs in a virtualenv of the pinned peers (bench.shared.VENVS)
    venv: str  # which one: "peers" (bench/requirements-peers.txt) or "oban"
    ceiling: str | None  # a limit: every result gets ratio_to_<ceiling> and fanout_to_<ceiling>

    def unsupported(self, wl: Workload) -> str | None:
        """Why it cannot run ``wl`` at all, or None."""
        ...

    def setup(self, dsn: str, python: str, env: Mapping[str, str]) -> None:
        """Its schema in the fresh database ``dsn`` (the ledger is already there)."""
        ...

    def prepopulate(self, conn: psycopg.Connection[Any], scopes: int, plan: datetime) -> None:
        """Mark ``plan`` as already run for every scope."""
        ...

    def command(self, python: str, dsn: str) -> list[str]:
        """One replica's command line (its configuration is in the environment)."""
        ...

    def extra_stats(self, counters: list[dict[str, Any]]) -> dict[str, Any]:
        """Numbers of its own, from its replicas' counters at the end of the window."""
        ...

    def settled(self, conn: psycopg.Connection[Any], scopes: int) -> bool:
        """Whether its replicas are past their first sight of ``scopes`` scopes (an idle
        window measures idle ticks only from then on)."""
        ...


class _Base:
    key = ""
    venv = "peers"  # the third-party virtualenv it runs in (bench.shared.VENVS)
    label = ""
    style: Mapping[str, Any] = MappingProxyType({})
    third_party = False
    ceiling: str | None = None
    module = ""  # the replica's module under bench.peers

    def unsupported(self, wl: Workload) -> str | None:
        return None

    def prepopulate(self, conn: psycopg.Connection[Any], scopes: int, plan: datetime) -> None:
        return None

    def command(self, python: str, dsn: str) -> list[str]:
        return [python, "-m", f"bench.peers.{self.module}"]

    def extra_stats(self, counters: list[dict[str, Any]]) -> dict[str, Any]:
        return {}

    def settled(self, conn: psycopg.Connection[Any], scopes: int) -> bool:
        return True  # it keeps no per-scope state to build on first sight


class _OnPgschedTable(_Base):
    """Runs on pgsched's own schema (migrated through pgsched's public ``Admin``)."""

    def setup(self, dsn: str, python: str, env: Mapping[str, str]) -> None:
        import pgsched

        pgsched.Admin(dsn=dsn).migrate()

    def prepopulate(self, conn: psycopg.Connection[Any], scopes: int, plan: datetime) -> None:
        conn.execute(
            "INSERT INTO pgsched.cron_executions (job_name, scope_kind, scope_id, "
            "plan_time, trigger, status, attempt, max_attempts, started_at, "
            "finished_at) SELECT %s, 'tenant', lpad(i::text, 6, '0'), %s, 'schedule', "
            "'SUCCESS', 1, 1, %s, %s FROM generate_series(0, %s - 1) AS i",
            (JOB, plan, plan, plan, scopes),
        )
        conn.execute("ANALYZE pgsched.cron_executions")


class RawLimit(_OnPgschedTable):
    """Bare batched SQL: claims, one batched ledger INSERT, finishes (bench/peers/raw.py)."""

    key = "raw"
    label = "raw batched SQL (limit)"
    style = line(color="0.45", linestyle="--", marker="s")
    ceiling: str | None = "limit"
    module = "raw"

    def extra_stats(self, counters: list[dict[str, Any]]) -> dict[str, Any]:
        """Rows per second inside the claim and finish statements of the busiest replica."""
        extras = [c.get("extra", {}) for c in counters]
        rows = sum(e.get("claimed", 0) for e in extras)
        busiest = max((e.get("claim_s", 0) + e.get("finish_s", 0) for e in extras), default=0)
        return {"claim_finish_rows_per_s": round(rows / busiest) if busiest else None}


class RawHandlerLimit(RawLimit):
    """The same batched claims and finishes, with pgsched's benchmark handler run once per
    execution in a coroutine of its own (bench/peers/raw_handler.py)."""

    key = "raw_handler"
    label = "raw + handler (limit with a Python handler)"
    style = line(color="0.15", linestyle=":", marker="P")
    ceiling: str | None = "handler_limit"
    module = "raw_handler"


class Pgsched(_OnPgschedTable):
    """This repository's working tree, as ``python -m pgsched run``."""

    key = "pgsched"
    label = "pgsched"
    style = line(color="tab:blue", linewidth=2.5, marker="o")
    app = "bench.peers.pgsched_app"  # the APP its replicas run

    def command(self, python: str, dsn: str) -> list[str]:
        return [python, "-m", "pgsched", "--dsn", dsn, "run", self.app, "--no-http"]

    def settled(self, conn: psycopg.Connection[Any], scopes: int) -> bool:
        """Every scope has its cursor and none is due: the first sight's claims are done."""
        row = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE due_at <= now()) FROM pgsched.cron_cursors"
            " WHERE job_name = %s AND retired_at IS NULL",
            (JOB,),
        ).fetchone()
        return row is not None and row[0] >= scopes and row[1] == 0


class PgschedBatch(Pgsched):
    """pgsched's job as a batch handler (``batch_size=500``) recording its runs with one INSERT
    a call, as the raw limit records a claimed batch."""

    key = "pgsched_batch"
    label = "pgsched, batch handler"
    style = line(color="tab:cyan", linewidth=2.0, marker="D")
    app = "bench.peers.pgsched_app:batched"


class SeedDesign(_OnPgschedTable):
    """One INSERT ... ON CONFLICT per plan, one UPDATE per won plan (bench/peers/seed.py)."""

    key = "seed"
    label = "seed design (baseline)"
    style = line(color="tab:orange", marker="^")
    module = "seed"


class _Peer(_Base):
    """A pinned third-party scheduler; ``python -m bench.peers.<module> setup`` installs its
    schema."""

    third_party = True

    def unsupported(self, wl: Workload) -> str | None:
        return None if wl.peers else f"{self.key} {wl.why_no_peers}"

    def setup(self, dsn: str, python: str, env: Mapping[str, str]) -> None:
        peer_setup(self.module, python, env, timeout_s=120)


class Pgqueuer(_Peer):
    key = "pgqueuer"
    label = "pgqueuer 1.6.0"
    module = "pgqueuer_peer"
    style = line(color="tab:green", marker="v")


class Procrastinate(_Peer):
    key = "procrastinate"
    label = "procrastinate 3.10.0"
    module = "procrastinate_peer"
    style = line(color="tab:red", marker="D")

    def prepopulate(self, conn: psycopg.Connection[Any], scopes: int, plan: datetime) -> None:
        conn.execute(
            "INSERT INTO procrastinate_periodic_defers (task_name, periodic_id, "
            "defer_timestamp) SELECT %s, lpad(i::text, 6, '0'), %s "
            "FROM generate_series(0, %s - 1) AS i ON CONFLICT DO NOTHING",
            (JOB, int(plan.timestamp()), scopes),
        )


class Oban(_Peer):
    """oban-py: one minute-resolution cron job, run by the cluster's leader, whose job
    enqueues one job per scope (bench/peers/oban_peer.py); Python >= 3.12, in a virtualenv
    of its own (bench/requirements-oban.txt)."""

    key = "oban"
    label = "oban 0.7.0"
    module = "oban_peer"
    venv = "oban"
    style = line(color="tab:purple", marker="X")

    def unsupported(self, wl: Workload) -> str | None:
        if wl.catch_up:
            return (
                f"{self.key}'s cron has no catch-up: a minute that no leader evaluated "
                "(replicas down) is never run"
            )
        if not wl.peers:
            return f"{self.key} {wl.why_no_peers}"
        if wl.every_s % 60:
            return (
                f"{self.key}'s cron is minute-resolution (and evaluated by the leader "
                f"alone): no cadence of {wl.every_s} s"
            )
        return None
