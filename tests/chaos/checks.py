"""The checks O1-O6 of docs/reliability.md, the side-effect ledger and what the replicas
logged, computed from what a scenario left behind (:class:`~tests.chaos.observed.Observed`),
and the figures file they are merged into.

O1-O3 and the ledger are safety (nothing ran twice, no older lease's write accepted, no plan
lost); O4 and O6 liveness (abandoned leases taken over in time, no row left RUNNING); O5 the
start delay without faults.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.chaos.observed import (
    Lease,
    Observed,
    Row,
    is_claim,
    next_change,
    percentile,
    rounded,
    summary,
)
from tests.chaos.timing import JOBS, TERMINAL

if TYPE_CHECKING:
    from tests.chaos.harness import Abandonment, ChaosRun


def o6_allowed(run: ChaosRun, at: datetime, old: list[tuple[str, float, str]]) -> int:
    """How many of the rows sampled ``at`` break O6 when rows held by a replica under injected
    latency get 3 extra round trips (until two round trips and a second after it ends)."""

    def extra(runner: str) -> float:
        return max(
            [
                3 * rtt
                for start, end, rtt, runners in run.latency
                if runner in runners and start <= at <= end + timedelta(seconds=2 * rtt + 1)
            ],
            default=0.0,
        )

    return sum(1 for _, age, runner in old if age > run.timing.o6_age_s + extra(runner))


def check_o1(obs: Observed) -> dict[str, Any]:
    """O1: plans with more than one SUCCESS: a row that went to SUCCESS twice, or was claimed
    again after its SUCCESS (each such claim counts)."""
    o1 = []
    for exec_id, evs in obs.events.items():
        successes = 0
        for h in evs:
            if is_claim(h) and successes:
                o1.append(str(exec_id))
            if h["new_status"] == "SUCCESS" and h["old_status"] != "SUCCESS":
                successes += 1
        if successes > 1:
            o1.append(str(exec_id))
    return {"O1_plans_with_more_than_one_success": len(o1)}


def _written_by_holder(row: Row) -> bool:
    """A SUCCESS row's result (the handler's tokens and runner) is the row's final lease."""
    result: dict[str, Any] = row["result"]
    return (
        result.get("lease_token") == str(row["lease_token"])
        and result.get("fencing_token") == row["fencing_token"]
        and result.get("runner_id") == row["runner_id"]
    )


def _of_final_lease(entry: Row, row: Row | None) -> bool:
    """A ``tx`` ledger row carries the tokens of its plan's row, which is SUCCESS."""
    return (
        row is not None
        and row["status"] == "SUCCESS"
        and entry["fencing_token"] == row["fencing_token"]
        and entry["lease_token"] == row["lease_token"]
    )


def check_o2(obs: Observed) -> dict[str, Any]:
    """O2: accepted writes from an older lease or fencing token: (a) SUCCESS rows not written
    by their final lease's holder, (b) ``tx`` ledger rows not of a SUCCESS row's final lease,
    (c) claims that did not increase the fencing token."""
    success_not_holder = [
        str(r["id"]) for r in obs.rows if r["status"] == "SUCCESS" and not _written_by_holder(r)
    ]
    tx_stale = [
        e["seq"]
        for e in obs.ledger
        if e["kind"] == "tx"
        and not _of_final_lease(e, obs.by_plan.get((e["job"], e["scope_id"], e["plan_time"])))
    ]
    fencing_regressions = [
        str(exec_id)
        for exec_id, h in obs.changes()
        if is_claim(h) and h["old_fencing"] is not None and h["new_fencing"] <= h["old_fencing"]
    ]
    detail = {
        "success_not_written_by_holder": len(success_not_holder),
        "tx_ledger_rows_not_of_final_lease": len(tx_stale),
        "fencing_not_increasing": len(fencing_regressions),
    }
    return {"O2_accepted_writes_from_older_lease": sum(detail.values()), "O2_detail": detail}


def check_o3(run: ChaosRun, grid: list[datetime], obs: Observed) -> dict[str, Any]:
    """O3: plans of the window (every job, scope and plan time of ``grid``) without a terminal
    row: SUCCESS, CANCELLED, or FAILED with no retry left (counted apart, by error code)."""
    missing: list[str] = []
    not_terminal: list[str] = []
    failed_final: Counter[str] = Counter()
    for job, i, plan in itertools.product(JOBS, range(run.timing.scopes), grid):
        row = obs.by_plan.get((job, str(i), plan))
        if row is None:
            missing.append(f"{job}/{i}/{plan.isoformat()}")
        elif row["status"] == "FAILED" and row["next_retry_at"] is None:
            failed_final[row["error_code"]] += 1
        elif row["status"] not in ("SUCCESS", "CANCELLED"):
            not_terminal.append(f"{job}/{i}/{plan.isoformat()}:{row['status']}")
    return {
        "O3_plans_without_terminal_row": len(missing) + len(not_terminal),
        "O3_detail": {
            "missing": missing[:20],
            "not_terminal": not_terminal[:20],
            "failed_for_good": dict(failed_final),
        },
    }


def _first_abandonments(run: ChaosRun) -> dict[Lease, Abandonment]:
    """Each abandoned lease with the first abandonment that left it behind."""
    first: dict[Lease, Abandonment] = {}
    for ab in run.abandonments:
        for lease in ab.leases:
            first.setdefault(lease, ab)
    return first


def _resolution(ab: Abandonment, token: uuid.UUID, h: Row) -> tuple[str, float | None]:
    """How the lease ``token`` left behind at ``ab`` was resolved by the row's next change
    ``h``, and the seconds that took (None: it was not abandoned after all)."""
    if h["at"] <= ab.at:
        # The holder's last write was executing as it was signalled (the statement ran
        # before, but committed after, the abandonment was read): nothing was abandoned.
        return "written_as_signalled", None
    if h["new_token"] != token:
        kind, when = "steal", h["started_at"]
    elif h["new_status"] == "FAILED" and h["error_code"] == "stale_timeout":
        kind, when = "close_out", h["finished_at"]
    else:
        kind, when = "holder_finished", h["finished_at"] or h["at"]
    return kind, (when - ab.at).total_seconds()


def check_o4(run: ChaosRun, obs: Observed) -> dict[str, Any]:
    """O4: abandonment to steal (the new claim's ``started_at``) or close-out
    (``finished_at``), per lease a killed, stopped or cut-off replica held."""
    t = run.timing
    o4: list[float] = []
    kinds: Counter[str] = Counter()
    unresolved = 0
    for (exec_id, token), ab in _first_abandonments(run).items():
        h = next_change(obs.events.get(exec_id, []), token)
        if h is None:
            unresolved += 1
            continue
        kind, seconds = _resolution(ab, token, h)
        kinds[kind] += 1
        if seconds is not None:
            o4.append(seconds)
    return {
        "O4_abandonment_to_steal_s": {
            **summary(o4, 50, 99),
            "bound": t.o4_bound_s,
            "over_bound": sum(1 for x in o4 if x > t.o4_bound_s),
            "kinds": dict(kinds),
            "unresolved": unresolved,
        }
    }


def _start_delay(h: Row) -> float:
    """A claim's ``started_at`` less its plan time, in seconds."""
    delay: timedelta = h["started_at"] - h["plan_time"]
    return delay.total_seconds()


def _first_claims(obs: Observed, due: Callable[[datetime], bool]) -> list[Row]:
    """The first claim (the insert) of every row whose plan time passes ``due``."""
    return [
        evs[0]
        for evs in obs.events.values()
        if evs and evs[0]["old_status"] is None and due(evs[0]["plan_time"])
    ]


def check_o5(run: ChaosRun, window: tuple[datetime, datetime], obs: Observed) -> dict[str, Any]:
    """O5: start delay (claim time on the database clock, less the plan time) of first
    attempts due in fault-free intervals; and the handler's own start (ledger, plain job)."""
    t = run.timing

    def in_window(plan: datetime) -> bool:
        return window[0] <= plan <= window[1]

    def quiet(plan: datetime) -> bool:
        return in_window(plan) and any(a <= plan <= b for a, b in run.quiet)

    first_claims = _first_claims(obs, quiet)
    o5 = [_start_delay(h) for h in first_claims]
    worst = sorted(first_claims, key=lambda h: h["plan_time"] - h["started_at"])[:5]
    o5_all = [_start_delay(h) for h in _first_claims(obs, in_window)]
    o5_handler = [
        (e["at"] - e["plan_time"]).total_seconds()
        for e in obs.ledger
        if e["kind"] == "plain" and e["attempt"] == 1 and quiet(e["plan_time"])
    ]
    return {
        "O5_start_delay_s": {
            **summary(o5, 50, 99, 90),
            "bound": t.o5_bound_s,
            "over_bound": sum(1 for x in o5 if x > t.o5_bound_s),
            "worst": [
                f"{_start_delay(h):.3f}s {h['job']}/{h['scope_id']}"
                f" {h['plan_time'].time().isoformat()} by {h['runner_id']}"
                for h in worst
            ],
            "handler_p50": rounded(percentile(o5_handler, 50)),
            "handler_p99": rounded(percentile(o5_handler, 99)),
            "whole_window_p50": rounded(percentile(o5_all, 50)),
            "whole_window_p99": rounded(percentile(o5_all, 99)),
        }
    }


def check_o6(run: ChaosRun) -> dict[str, Any]:
    """O6: RUNNING rows older than run_timeout + stale_timeout (sampled every second, and
    now), the most seen at once; also with the allowance for injected latency."""
    t = run.timing
    final_old = run.q(
        "SELECT count(*) AS n FROM {s}.cron_executions WHERE status = 'RUNNING'"
        " AND started_at < clock_timestamp() - make_interval(secs => %s)",
        (t.o6_age_s,),
    )[0]["n"]
    seen = [row for _, old in run.o6_samples for row in old]
    return {
        "O6_running_rows_too_old": max([len(old) for _, old in run.o6_samples] + [final_old]),
        "O6_with_latency_allowance": max(
            [o6_allowed(run, at, old) for at, old in run.o6_samples] + [final_old]
        ),
        "O6_detail": {
            "samples": len(run.o6_samples),
            "distinct_rows_seen": len({row[0] for row in seen}),
            "oldest_s": rounded(max((row[1] for row in seen), default=None)),
            "at_end": final_old,
            "age_bound_s": t.o6_age_s,
        },
    }


def _duplicates(counts: Counter[tuple[str, datetime]]) -> dict[str, int]:
    """Plans with a ledger row, those with more than one, and the rows beyond the first."""
    return {
        "plans": len(counts),
        "plans_with_duplicates": sum(1 for c in counts.values() if c > 1),
        "extra_rows": sum(c - 1 for c in counts.values() if c > 1),
    }


def check_ledger(obs: Observed) -> dict[str, Any]:
    """The ledger: side effects per plan, transactional and not. ``tx`` must be exactly once:
    at most one row per plan, and one for every ``tx`` SUCCESS (its fencing token's)."""
    per_plan: dict[str, Counter[tuple[str, datetime]]] = {"tx": Counter(), "plain": Counter()}
    for e in obs.ledger:
        per_plan[e["kind"]][(e["scope_id"], e["plan_time"])] += 1
    tx_success = {
        (r["scope_id"], r["plan_time"], r["fencing_token"])
        for r in obs.rows
        if r["job_name"] == "tx" and r["status"] == "SUCCESS"
    }
    tx_written = {
        (e["scope_id"], e["plan_time"], e["fencing_token"]) for e in obs.ledger if e["kind"] == "tx"
    }
    return {
        "ledger": {
            "tx": _duplicates(per_plan["tx"]),
            "plain": _duplicates(per_plan["plain"]),
            "tx_success_without_ledger_row": len(tx_success - tx_written),
        }
    }


def _runs(run: ChaosRun, obs: Observed) -> dict[str, Any]:
    """Claims (of which steals: claimed from RUNNING), outcomes and concurrency."""
    claims = [h for _, h in obs.changes() if is_claim(h)]
    return {
        "runs": {
            "claims": len(claims),
            "steals": sum(1 for h in claims if h["old_status"] == "RUNNING"),
            "success": sum(1 for r in obs.rows if r["status"] == "SUCCESS"),
            "failed_by_code": dict(
                Counter(h["error_code"] for h in obs.history if h["new_status"] == "FAILED")
            ),
            "max_in_flight": max(run.running_samples, default=0),
            "claims_by_runner": dict(Counter(h["runner_id"] for h in claims)),
        }
    }


def _taken_over(evs: list[Row], attempt: Any) -> bool:
    """The lease of ``attempt`` was stolen (the next attempt claimed the row from RUNNING) or
    closed out stale."""
    return any(
        (is_claim(h) and h["old_status"] == "RUNNING" and h["attempt"] == attempt + 1)
        or (
            h["new_status"] == "FAILED"
            and h["error_code"] == "stale_timeout"
            and h["attempt"] == attempt
        )
        for h in evs
    )


def _own_write_committed(evs: list[Row], attempt: Any, runner_id: Any) -> bool:
    """The holder's own terminal write of ``attempt`` was committed (a terminal write keeps
    the row's runner and attempt): the lease was never lost."""
    return any(
        h["old_status"] == "RUNNING"
        and h["new_status"] in TERMINAL
        and h["error_code"] != "stale_timeout"
        and h["attempt"] == attempt
        and h["runner_id"] == runner_id
        for h in evs
    )


def _lease_lost(obs: Observed) -> dict[str, Any]:
    """pgsched's ``lease_lost`` events: borne out when the lease was taken over; otherwise
    nobody else ever held it, a false alarm (``not_taken_over``)."""
    lost = obs.logged("lease_lost")
    taken_over = own_write = 0
    for e in lost:
        if not e.get("execution_id"):
            continue
        attempt, evs = e.get("attempt"), obs.events.get(uuid.UUID(e["execution_id"]), [])
        taken_over += _taken_over(evs, attempt)
        own_write += _own_write_committed(evs, attempt, e.get("runner_id"))
    return {
        "lease_lost": {
            "logged": len(lost),
            "handler_told": sum(1 for n in obs.notices if n["what"] == "handler_told_lease_lost"),
            "taken_over": taken_over,
            "not_taken_over": len(lost) - taken_over,
            "own_terminal_write_committed": own_write,
            # ... of which the same process also logged the run's outcome as written: a
            # heartbeat that raced the run's own, accepted, terminal write.
            "own_outcome_written": sum(1 for e in obs.logs if e.get("_own_outcome")),
            "reasons": dict(Counter(str(e.get("reason")) for e in lost)),
        }
    }


def _replica_clocks(obs: Observed) -> dict[str, Any]:
    """Replica clocks as the handlers saw them, against the database's (median, min, max)."""
    skew: dict[str, list[float]] = defaultdict(list)
    for e in obs.ledger:
        skew[e["runner_id"]].append((e["replica_wall"] - e["at"]).total_seconds())
    return {
        "replica_clock_minus_db_s": {
            rid: {
                "median": rounded(percentile(v, 50), 2),
                "min": rounded(min(v), 2),
                "max": rounded(max(v), 2),
            }
            for rid, v in sorted(skew.items())
        }
    }


LOGGED_ERRORS = ("tick_error", "heartbeat_error", "writer_retry", "stale_closed", "listen_error")


def evaluate(run: ChaosRun, window: tuple[datetime, datetime]) -> dict[str, Any]:
    """O1-O6, the ledger and what the replicas logged, as one JSON-serialisable dict (and,
    under ``_private``, the raw rows the scenarios' own checks read)."""
    t = run.timing
    obs = Observed.read(run)
    grid = run.grid(window)
    return {
        "scenario": run.name,
        "timing": t.__dict__,
        "window": [window[0].isoformat(), window[1].isoformat()],
        "window_s": round((window[1] - window[0]).total_seconds(), 1),
        "plans_checked": len(grid) * t.scopes * len(JOBS),
        **check_o1(obs),
        **check_o2(obs),
        **check_o3(run, grid, obs),
        **check_o4(run, obs),
        **check_o5(run, window, obs),
        **check_o6(run),
        **check_ledger(obs),
        **_runs(run, obs),
        **_lease_lost(obs),
        "log_events": {k: obs.log_counts.get(k, 0) for k in LOGGED_ERRORS},
        **_replica_clocks(obs),
        "events": run.events,
        "_private": {
            "notices": obs.notices,
            "lost_logged": {
                (e.get("runner_id"), e.get("execution_id")) for e in obs.logged("lease_lost")
            },
            "events_by_id": obs.events,
            "rows_by_id": obs.by_id,
        },
    }


class LivenessViolation(AssertionError):
    """O4 or O6 failed: a lease was not taken over in time, or a row stayed RUNNING too long
    (as opposed to a safety check, O1-O3 and the ledger)."""


def violations(figures: dict[str, Any], *, o5: bool = False, o4: bool = True) -> list[str]:
    """The checks that failed, as readable lines (empty when the scenario passed)."""
    out = []
    if figures["O1_plans_with_more_than_one_success"]:
        out.append(f"O1: {figures['O1_plans_with_more_than_one_success']} plans succeeded twice")
    if figures["O2_accepted_writes_from_older_lease"]:
        out.append(f"O2: accepted writes from an older lease: {figures['O2_detail']}")
    if figures["O3_plans_without_terminal_row"]:
        out.append(f"O3: plans without a terminal row: {figures['O3_detail']}")
    o4f = figures["O4_abandonment_to_steal_s"]
    if o4 and (o4f["over_bound"] or o4f["unresolved"]):
        out.append(f"O4: abandoned leases not taken over within {o4f['bound']} s: {o4f}")
    o5f = figures["O5_start_delay_s"]
    if o5 and (not o5f["n"] or (o5f["p99"] or 0) > o5f["bound"]):
        out.append(f"O5: p99 start delay above {o5f['bound']} s: {o5f}")
    if figures["O6_with_latency_allowance"]:
        out.append(
            f"O6: RUNNING rows older than run_timeout + stale_timeout: {figures['O6_detail']}"
        )
    led = figures["ledger"]
    if led["tx"]["plans_with_duplicates"] or led["tx_success_without_ledger_row"]:
        out.append(f"ledger: transactional side effects not exactly once: {led}")
    return out


def public(figures: dict[str, Any]) -> dict[str, Any]:
    """The figures without the raw rows kept for scenario-specific checks."""
    return {k: v for k, v in figures.items() if not k.startswith("_")}


def write_figures(path: str | os.PathLike[str], key: str, figures: dict[str, Any]) -> None:
    """Merge one scenario's figures into the JSON file at ``path`` (created if missing)."""
    target = Path(path)
    data: dict[str, Any] = {}
    if target.exists():
        with contextlib.suppress(ValueError):
            data = json.loads(target.read_text())
    data[key] = public(figures)
    tmp = target.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
    tmp.replace(target)
