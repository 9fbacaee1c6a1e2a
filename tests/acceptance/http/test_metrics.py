"""/metrics of a real replica (the README's metric table): the names, types and labels, and
values that follow the database and what this replica did."""

from __future__ import annotations

from typing import Any

import pytest

from pgsched._telemetry.gauges import CACHE_TTL_S
from tests.acceptance.http.cluster import (
    EXPECTED_METRICS,
    HOSTILE_ERROR,
    MAIN_JOBS,
    SCOPE_ID,
    SEEDED_GAP_S,
    TOKEN,
    Cluster,
    Scrape,
    scrape,
    seed_job,
    seed_run,
    stable,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance


# -- 1. names and labels -------------------------------------------------------------------


def test_metrics_expose_spec_names_types_and_labels(cluster: Cluster) -> None:
    # Wait until every labelled family has at least one series (the skip counter included:
    # the seeded old plan of `tick` makes the first claim supersede ~100 plans).
    m = wait_until(
        lambda: (
            (s := scrape(cluster.main)).value(
                "pgsched_plans_skipped_total", job="tick", reason="superseded"
            )
            and s.value("pgsched_runs_total", job="boom", status="failed")
            and s.value("pgsched_last_success_timestamp_seconds", job="tick")
            and s
        ),
        15,
        "series in every family",
    )
    assert isinstance(m, Scrape)
    for name, (kind, labels, sample) in EXPECTED_METRICS.items():
        family = m.families.get(name)
        assert family is not None, f"{name} missing from /metrics"
        assert family.type == kind, (name, family.type)
        samples = [s for s in family.samples if not s.name.endswith("_created")]
        assert samples, f"{name} has no series"
        assert any(s.name == sample for s in samples), (name, {s.name for s in samples})
        for s in samples:
            names = set(s.labels) - ({"le"} if s.name.endswith("_bucket") else set())
            assert names == labels, (s.name, s.labels)
    # The exact sample names of the README's metric table in the text itself.
    for sample in (
        "pgsched_runs_total{",
        "pgsched_run_duration_seconds_bucket{",
        "pgsched_claims_total{",
        "pgsched_running_stale{",
        "pgsched_failed_runs{",
        "pgsched_last_success_timestamp_seconds{",
        "pgsched_plans_skipped_total{",
        "pgsched_leases_lost_total{",
        "pgsched_tick_duration_seconds_bucket{le=",
        "pgsched_tick_duration_seconds_count ",
    ):
        assert sample in m.text, sample

    label_values = {
        (n, v)
        for f in m.families.values()
        if f.name.startswith("pgsched_")
        for s in f.samples
        for n, v in s.labels.items()
    }
    assert {v for n, v in label_values if n == "status"} <= {"success", "failed"}
    assert {v for n, v in label_values if n == "outcome"} == {"won", "stole", "retry", "conflict"}
    assert {v for n, v in label_values if n == "reason"} <= {"superseded", "max_lateness"}
    assert not [n for n, _ in label_values if "scope" in n.lower()]
    assert SCOPE_ID not in m.text  # the running job's scope id is in no label
    for job in MAIN_JOBS:
        assert ("job", job) in label_values, job


# -- 2. values -----------------------------------------------------------------------------


# The database gauges are read on scrape and cached for CACHE_TTL_S: a change in the database
# shows within that, and never runs ahead of it. The deadline allows 8 s more: a guard against
# an order-of-magnitude regression, not a performance claim (those live in bench/).
GAUGE_DEADLINE_S = CACHE_TTL_S + 8


def _gauge_becomes(cluster: Cluster, sample: str, job: str, expected: float) -> None:
    wait_until(
        lambda: scrape(cluster.main).value(sample, job=job) == expected,
        GAUGE_DEADLINE_S,
        f"{sample}{{job={job}}} to become {expected}",
        interval=0.25,
    )


def test_running_stale_gauge_follows_the_database(cluster: Cluster) -> None:
    job = "ghost_stale"  # known in job_state, run by no replica: nobody closes its rows
    seed_job(cluster, job)
    _gauge_becomes(cluster, "pgsched_running_stale", job, 0)

    first = seed_run(cluster, job, "RUNNING", stale_in_s=-60)
    seed_run(cluster, job, "RUNNING", ago_s=10, stale_in_s=600)  # live lease: not stale
    _gauge_becomes(cluster, "pgsched_running_stale", job, 1)

    seed_run(cluster, job, "RUNNING", ago_s=200, stale_in_s=-1)
    _gauge_becomes(cluster, "pgsched_running_stale", job, 2)

    cluster.q(
        "UPDATE {s}.cron_executions SET status = 'FAILED', finished_at = clock_timestamp()"
        " WHERE id = %s",
        (first,),
    )
    _gauge_becomes(cluster, "pgsched_running_stale", job, 1)
    m = scrape(cluster.main)
    assert m.value("pgsched_failed_runs", job=job) == 1
    assert m.value("pgsched_running_stale", job="tick") == 0


def test_failed_runs_gauge_counts_only_failures_without_retry(cluster: Cluster) -> None:
    job = "ghost_failed"
    seed_job(cluster, job)
    seed_run(cluster, job, "FAILED", finished_ago_s=250)  # no retry left: counted
    seed_run(cluster, job, "FAILED", ago_s=400, finished_ago_s=390, retry_in_s=3600)
    seed_run(cluster, job, "SUCCESS", ago_s=500, finished_ago_s=480)
    _gauge_becomes(cluster, "pgsched_failed_runs", job, 1)
    finished = cluster.one(
        "SELECT max(finished_at) FROM {s}.cron_executions WHERE job_name = %s"
        " AND status = 'SUCCESS'",
        (job,),
    )
    assert scrape(cluster.main).value(
        "pgsched_last_success_timestamp_seconds", job=job
    ) == pytest.approx(finished.timestamp(), abs=1e-3)

    # boom fails every second with max_attempts=1: the gauge catches up with a count taken
    # before, never exceeds a count taken after, and it moves.
    count = "SELECT count(*) FROM {s}.cron_executions WHERE job_name = 'boom'" + (
        " AND status = 'FAILED' AND next_retry_at IS NULL"
    )
    before = cluster.one(count)
    wait_until(
        lambda: scrape(cluster.main).v("pgsched_failed_runs", job="boom") >= before,
        GAUGE_DEADLINE_S,
        "pgsched_failed_runs{job=boom} to catch up with the database",
    )
    gauge = scrape(cluster.main).value("pgsched_failed_runs", job="boom")
    assert gauge is not None and gauge <= cluster.one(count)
    wait_until(
        lambda: scrape(cluster.main).v("pgsched_failed_runs", job="boom") > gauge,
        GAUGE_DEADLINE_S,
        "pgsched_failed_runs{job=boom} to grow",
    )


def test_runs_total_and_duration_match_the_rows_this_replica_finished(cluster: Cluster) -> None:
    r = cluster.runner

    def read() -> tuple[bool, tuple[Any, ...]]:
        m1 = scrape(cluster.main)
        rows = dict(
            ((job, status), n)
            for job, status, n in cluster.q(
                "SELECT job_name, status, count(*) FROM {s}.cron_executions"
                " WHERE runner_id = %s AND job_name IN ('tick', 'boom') GROUP BY 1, 2",
                (r,),
            )
        )
        m2 = scrape(cluster.main)
        counters = tuple(
            (
                m.v("pgsched_runs_total", job=job, status="success"),
                m.v("pgsched_runs_total", job=job, status="failed"),
                m.v("pgsched_run_duration_seconds_count", job=job),
            )
            for m in (m1, m2)
            for job in ("tick", "boom")
        )
        db = (
            (rows.get(("tick", "SUCCESS"), 0), rows.get(("tick", "FAILED"), 0)),
            (rows.get(("boom", "SUCCESS"), 0), rows.get(("boom", "FAILED"), 0)),
        )
        m_counts = tuple((c[0], c[1]) for c in counters[:2])
        settled = counters[:2] == counters[2:] and m_counts == db
        return settled, counters[:2]

    ok, ((tick_ok, tick_failed, tick_n), (boom_ok, boom_failed, boom_n)) = stable(
        read, what="runs_total == the database's finished rows of this replica"
    )
    assert ok
    assert tick_ok >= 1 and tick_failed == 0 and tick_n == tick_ok
    assert boom_failed >= 1 and boom_ok == 0 and boom_n == boom_failed
    # The failures counted are handler errors with the exception in error_msg.
    codes = cluster.q(
        "SELECT DISTINCT error_code, error_msg FROM {s}.cron_executions"
        " WHERE job_name = 'boom' AND status = 'FAILED'"
    )
    assert codes == [("handler_error", f"RuntimeError: {HOSTILE_ERROR}")]
    # Both move on: boom keeps failing.
    wait_until(
        lambda: (
            scrape(cluster.main).v("pgsched_runs_total", job="boom", status="failed") > boom_failed
        ),
        10,
        "pgsched_runs_total{job=boom,status=failed} to grow",
    )


def test_last_success_timestamp_is_the_latest_success_in_the_database(cluster: Cluster) -> None:
    # The finish of the newest successful plan (it only grows: a newer plan's success sets it
    # to the moment it finished).
    latest = "SELECT extract(epoch FROM finished_at)::float8 FROM {s}.cron_executions"
    latest += " WHERE job_name = 'tick' AND status = 'SUCCESS' ORDER BY plan_time DESC LIMIT 1"
    # A success made during this test: not the seeded row (SEEDED_GAP_S old, and the only
    # success when this test runs first on a machine slow to start the replicas), nor one
    # from before a pause of tick by another test.
    started = cluster.one("SELECT extract(epoch FROM clock_timestamp())::float8")

    def newer() -> float | None:
        value = cluster.one(latest)
        return value if value is not None and value > started else None

    before = wait_until(newer, 30, "a SUCCESS of tick finished during the test")
    wait_until(
        lambda: (
            scrape(cluster.main).v("pgsched_last_success_timestamp_seconds", job="tick")
            >= before - 1e-3
        ),
        GAUGE_DEADLINE_S,
        lambda: (
            f"the gauge to catch up with the database's {before}: it says"
            f" {scrape(cluster.main).value('pgsched_last_success_timestamp_seconds', job='tick')}"
        ),
    )
    gauge = scrape(cluster.main).value("pgsched_last_success_timestamp_seconds", job="tick")
    after = cluster.one(latest)
    assert gauge is not None
    assert before - 1e-3 <= gauge <= after + 1e-3, (before, gauge, after)
    # No series for a job that never succeeded.
    assert scrape(cluster.main).value("pgsched_last_success_timestamp_seconds", job="boom") is None


def test_claims_and_skips_match_the_rows_this_replica_claimed(cluster: Cluster) -> None:
    r = cluster.runner
    # Two claims of `tick` at least, whenever this test runs (first, in a shuffled order).
    wait_until(
        lambda: (
            cluster.one(
                "SELECT count(*) FROM {s}.cron_executions"
                " WHERE job_name = 'tick' AND runner_id = %s",
                (r,),
            )
            >= 2
        ),
        15,
        "the main replica's second claim of tick",
    )

    def read() -> tuple[bool, Any]:
        m1 = scrape(cluster.main)
        claimed = dict(
            cluster.q(
                "SELECT job_name, count(*) FROM {s}.cron_executions WHERE runner_id = %s"
                " GROUP BY 1",
                (r,),
            )
        )
        # latest_only: what this replica (the only one on this schema) passed over is in the
        # ledger's spans of skipped plans, written in the claim's transaction. A model of where
        # each scope started cannot tell: with first_sight="latest" the first plan is the one
        # due at first sight, superseded when the first claim comes after the next falls due.
        spans = dict(
            cluster.q(
                "SELECT job_name, sum(plans)::int FROM {s}.cron_skips"
                " WHERE reason = 'superseded' AND job_name IN ('tick', 'boom') GROUP BY 1"
            )
        )
        # ... and no plan recorded as passed over has a row.
        overlap = cluster.one(
            "SELECT count(*) FROM {s}.cron_executions e JOIN {s}.cron_skips k"
            " ON k.job_name = e.job_name AND k.scope_kind = e.scope_kind"
            " AND k.scope_id = e.scope_id AND e.plan_time BETWEEN k.first_plan AND k.last_plan"
            " WHERE e.trigger = 'schedule' AND k.reason = 'superseded'"
        )
        assert overlap == 0, "a plan recorded as superseded has a row"
        m2 = scrape(cluster.main)
        metrics = [
            {
                job: (
                    m.v("pgsched_claims_total", job=job, outcome="won"),
                    m.v("pgsched_claims_total", job=job, outcome="stole"),
                    m.v("pgsched_claims_total", job=job, outcome="retry"),
                    m.v("pgsched_claims_total", job=job, outcome="conflict"),
                    m.v("pgsched_plans_skipped_total", job=job, reason="superseded"),
                )
                for job in MAIN_JOBS
            }
            for m in (m1, m2)
        ]
        expected = {job: (claimed.get(job, 0), 0, 0, 0, spans.get(job, 0)) for job in MAIN_JOBS}
        return metrics[0] == metrics[1] == expected, (metrics[0], expected)

    # The counters are bumped just after a claim commits: they agree with the rows when no
    # claim is in flight. tick and boom claim every second, so on a loaded machine (a reading
    # taking a second) two readings rarely fall between claims: they are paused meanwhile.
    every_second = "UPDATE {s}.job_state SET paused = %s WHERE job_name IN ('tick', 'boom')"
    cluster.q(every_second, (True,))
    try:
        ok, (metrics, expected) = stable(read, what="claims_total == this replica's rows")
    finally:
        cluster.q(every_second, (False,))
    assert ok, (metrics, expected)
    assert metrics["tick"][0] >= 2  # it has been claiming every second
    # The seeded plan 100 s before start was superseded by everything up to the first claim.
    assert metrics["tick"][4] >= SEEDED_GAP_S - 10


def test_tick_duration_histogram_grows_with_every_tick(cluster: Cluster) -> None:
    # A first tick observed, whenever this test runs (first, in a shuffled order).
    wait_until(
        lambda: (scrape(cluster.main).value("pgsched_tick_duration_seconds_count") or 0) >= 1,
        10,
        "a first tick in the histogram",
    )
    first = scrape(cluster.main)
    count = first.value("pgsched_tick_duration_seconds_count")
    assert count is not None and count >= 1
    assert first.v("pgsched_tick_duration_seconds_sum") > 0
    inf = first.value("pgsched_tick_duration_seconds_bucket", le="+Inf")
    assert inf == count
    wait_until(
        lambda: scrape(cluster.main).v("pgsched_tick_duration_seconds_count") >= count + 2,
        10,
        "two more ticks (tick_interval is 0.5 s)",
    )


def test_leases_lost_counts_one_lost_lease_once(cluster: Cluster) -> None:
    m = scrape(cluster.main)
    assert m.value("pgsched_leases_lost_total", job="lossy") == 0  # declared at start
    resp = cluster.main.post("/api/jobs/lossy/trigger", token=TOKEN)
    assert resp.status == 201, resp.text
    ident = resp.json()["id"]
    wait_until(
        lambda: cluster.q(
            "SELECT 1 FROM {s}.cron_executions WHERE id = %s AND status = 'RUNNING'", (ident,)
        ),
        10,
        "the triggered lossy run to start",
    )
    # Another holder takes the row over: the replica's next heartbeat matches nothing.
    cluster.q(
        "UPDATE {s}.cron_executions SET lease_token = gen_random_uuid() WHERE id = %s", (ident,)
    )
    notes = wait_until(
        lambda: cluster.q("SELECT note FROM {s}.ledger WHERE execution_id = %s", (ident,)),
        15,
        "the lossy handler to notice and return",
    )
    assert notes == [("lost",)]
    assert scrape(cluster.main).value("pgsched_leases_lost_total", job="lossy") == 1
    # The old holder wrote nothing.
    assert cluster.q(
        "SELECT status, finished_at FROM {s}.cron_executions WHERE id = %s", (ident,)
    ) == [("RUNNING", None)]
