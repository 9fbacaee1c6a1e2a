"""deploy/grafana/pgsched.json: the dashboard only queries metrics pgsched exports, and
aggregates them the way the README says (counters summed, database gauges max by job)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pgsched._records import Server
from pgsched._structures import JobStatus
from pgsched._telemetry.metrics import Metrics

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "pgsched.json"

# Identical on every replica (read from the database): aggregate with max by (job).
DATABASE_GAUGES = (
    "pgsched_running_stale",
    "pgsched_failed_runs",
    "pgsched_last_success_timestamp_seconds",
)
# Series Prometheus itself adds for every target.
PROMETHEUS_BUILTINS = {
    "up",
    "scrape_duration_seconds",
    "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling",
    "scrape_series_added",
}
PROMQL_KEYWORDS = {
    "bool",
    "and",
    "or",
    "unless",
    "offset",
    "inf",
    "nan",
    "atan2",
    "group_left",
    "group_right",
    "by",
    "without",
    "on",
    "ignoring",
}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENTIFIER = re.compile(r"(?<![\w:$.])([A-Za-z_:][A-Za-z0-9_:]*)(?![\w:])(?!\s*\()")

Panel = dict[str, Any]


def _exported_metric_names() -> set[str]:
    """Every sample name a replica exports: exercise each event so that the labelled
    metrics have children (an unlabelled-yet metric exports no samples at all)."""
    metrics = Metrics()
    metrics.declare("job", timedelta(minutes=5))
    metrics.claims("job", "won", 1)
    metrics.plans_skipped("job", "superseded", 1)
    metrics.lease_lost("job")
    metrics.loop_blocked("job")
    metrics.claim_lock_busy("job")
    metrics.runs_finished("job", "SUCCESS", 1)
    metrics.runs_finished("job", "FAILED", 1)
    metrics.run_duration_of("job", 1.0)
    metrics.started_late("job", 0.5)
    metrics.tick(0.01)
    first, promoted = Server("7", 1, "db-a:5432"), Server("7", 2, "db-b:5432")
    metrics.database_server(None, first)
    metrics.database_server(first, promoted)
    now = datetime.now(UTC)
    metrics.cluster.set(
        [JobStatus("job", "every 5m", False, now, "SUCCESS", now, 0, 0, 0, 0, now, "r1")]
    )
    names = set()
    for family in metrics.registry.collect():
        samples = {sample.name for sample in family.samples}
        assert samples, f"{family.name} exported no samples; exercise it above"
        names |= samples
    return names


EXPORTED = _exported_metric_names()


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    board: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return board


def _panels(panels: list[Panel]) -> Iterator[Panel]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # panels nested in collapsed rows


def _exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in _panels(dashboard["panels"])
        for target in panel.get("targets", [])
    ]


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, label names,
    label values and range durations stripped)."""
    text = _STRING.sub(" ", expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    return {name for name in _IDENTIFIER.findall(text) if name.lower() not in PROMQL_KEYWORDS}


def test_metric_name_extraction() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (job, le) (rate(a_bucket{job=~"$job", le!="x"}'
        "[$__rate_interval]))) / on (job) group_left max without (instance) (b) > bool 1e3"
    )
    assert metric_names(expr) == {"a_bucket", "b"}
    assert metric_names("time() - max by(job) (c)") == {"c"}


def test_dashboard_basics(dashboard: dict[str, Any]) -> None:
    assert dashboard["title"] and dashboard["uid"]
    assert dashboard["schemaVersion"] >= 36
    ids = [panel["id"] for panel in _panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {ids}"
    assert all(isinstance(i, int) for i in ids)


def test_template_variables(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    datasource = variables["datasource"]
    assert (datasource["type"], datasource["query"]) == ("datasource", "prometheus")
    job = variables["job"]
    assert job["type"] == "query"
    query = job["query"]["query"] if isinstance(job["query"], dict) else job["query"]
    assert query == "label_values(pgsched_runs_total, job)"
    assert job["datasource"]["uid"] == "${datasource}"


def test_panels_query_the_datasource_variable(dashboard: dict[str, Any]) -> None:
    for panel in _panels(dashboard["panels"]):
        for target in panel.get("targets", []):
            source = target.get("datasource", panel.get("datasource"))
            assert source == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]


def test_exprs_name_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    exprs = _exprs(dashboard)
    assert exprs
    for title, expr in exprs:
        names = metric_names(expr)
        assert names, f"{title}: no metric in {expr!r}"
        unknown = names - EXPORTED - PROMETHEUS_BUILTINS
        assert not unknown, f"{title}: {sorted(unknown)} not exported by pgsched: {expr!r}"


def test_required_views_are_present(dashboard: dict[str, Any]) -> None:
    used = set().union(*(metric_names(expr) for _, expr in _exprs(dashboard)))
    for name in (
        "pgsched_runs_total",
        "pgsched_failed_runs",
        "pgsched_start_lag_seconds_bucket",
        "pgsched_running_stale",
        "pgsched_claims_total",
        "pgsched_tick_duration_seconds_bucket",
        "pgsched_last_success_timestamp_seconds",
    ):
        assert name in used, f"no panel shows {name}"
    squashed = [" ".join(expr.split()) for _, expr in _exprs(dashboard)]
    for quantile in ("0.5", "0.99"):
        assert any(
            e.startswith(f"histogram_quantile({quantile},") and "pgsched_start_lag_seconds" in e
            for e in squashed
        ), f"no start lag p{quantile}"
    assert any(
        re.search(r"time\(\)\s*-\s*max by ?\(job\) \(pgsched_last_success_timestamp_seconds", e)
        for e in squashed
    )
    assert any(
        re.search(r"sum by \((job, )?outcome\) \(rate\(pgsched_claims_total", e) for e in squashed
    )


def test_database_gauges_only_under_max_by_job(dashboard: dict[str, Any]) -> None:
    for title, expr in _exprs(dashboard):
        for gauge in DATABASE_GAUGES:
            uses = len(re.findall(rf"\b{gauge}\b", expr))
            under_max = len(re.findall(rf"\bmax\s*by\s*\(\s*job\s*\)\s*\(\s*{gauge}\b", expr))
            assert uses == under_max, f"{title}: {gauge} outside `max by (job) (...)`: {expr!r}"


def test_counters_and_histograms_are_rated_and_summed(dashboard: dict[str, Any]) -> None:
    """Counters are per replica: rate them, then sum across replicas."""
    for title, expr in _exprs(dashboard):
        for name in metric_names(expr):
            if name.endswith(("_total", "_bucket")):
                pattern = rf"sum\s*(?:by\s*\([^()]*\)\s*)?\(\s*(?:rate|increase)\(\s*{name}\b"
                assert re.search(pattern, expr), f"{title}: {name} not sum(rate(...)): {expr!r}"
            if name.endswith("_bucket"):
                assert "histogram_quantile(" in expr, f"{title}: raw buckets: {expr!r}"


def test_job_filter_applies_to_job_labelled_metrics(dashboard: dict[str, Any]) -> None:
    for title, expr in _exprs(dashboard):
        for name in metric_names(expr):
            if name.startswith("pgsched_") and not name.startswith("pgsched_tick_"):
                assert re.search(rf'\b{name}\{{[^}}]*job=~"\$job"', expr), (
                    f"{title}: {name} ignores the $job variable: {expr!r}"
                )
