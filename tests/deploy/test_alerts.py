"""The Prometheus alerts in deploy/kubernetes/prometheusrule.yaml.

Structure (no tools needed): every alert has a severity, a summary, a description and a
runbook; the gauges that every replica exports identically (read from the shared database)
are aggregated with ``max by (job)``, the per-replica counters with ``sum``.

Behaviour (needs ``promtool``): promtool reads plain rules files, not a PrometheusRule, so
``spec.groups`` is written to a temporary rules file, ``promtool check rules`` checks it and
``promtool test rules`` runs deploy/prometheus/tests/*.yaml with their ``rule_files``
pointed at it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULE_FILE = ROOT / "deploy" / "kubernetes" / "prometheusrule.yaml"
PROMTOOL_TESTS = sorted((ROOT / "deploy" / "prometheus" / "tests").glob("*.yaml"))

EXPECTED_ALERTS = {
    "PgschedStaleLeases",
    "PgschedFailedRuns",
    "PgschedNoRecentSuccess",
    "PgschedLeasesLost",
    "PgschedReplicaDown",
    "PgschedAllReplicasDown",
    "PgschedTickSlow",
}
SEVERITIES = {"info", "warning", "critical"}
# Identical on every replica: must be aggregated with ``max by (job)``.
DB_GAUGES = (
    "pgsched_running_stale",
    "pgsched_failed_runs",
    "pgsched_last_success_timestamp_seconds",
    "pgsched_job_interval_seconds",
)
# What each replica did: must be summed over the replicas.
COUNTERS = (
    "pgsched_runs_total",
    "pgsched_claims_total",
    "pgsched_plans_skipped_total",
    "pgsched_leases_lost_total",
)


def _load_rule() -> dict[str, Any]:
    doc = yaml.safe_load(RULE_FILE.read_text())
    assert isinstance(doc, dict)
    return doc


def _alerts() -> list[dict[str, Any]]:
    return [r for g in _load_rule()["spec"]["groups"] for r in g["rules"] if "alert" in r]


def _alert_id(rule: dict[str, Any]) -> str:
    return str(rule["alert"])


# -- PromQL helpers --------------------------------------------------------------------------

_AGGREGATION = re.compile(
    r"\b(sum|min|max|avg|count|group|stddev|stdvar|topk|bottomk|quantile|count_values)"
    r"\s*(?:(by|without)\s*\(([^)]*)\))?\s*$"
)


def enclosing_aggregations(expr: str, pos: int) -> list[str]:
    """The aggregations whose parentheses enclose ``expr[pos]``, innermost first, written
    like ``max by (job)`` (labels sorted). Only the prefix form ``max by (job) (...)`` is
    recognised; ``max(...) by (job)`` counts as no aggregation."""
    opened: list[int] = []
    for i, ch in enumerate(expr[:pos]):
        if ch == "(":
            opened.append(i)
        elif ch == ")" and opened:
            opened.pop()
    found = []
    for start in reversed(opened):
        m = _AGGREGATION.search(expr[:start])
        if m:
            op, modifier, labels = m.groups()
            if modifier:
                names = sorted(x.strip() for x in labels.split(",") if x.strip())
                found.append(f"{op} {modifier} ({', '.join(names)})")
            else:
                found.append(op)
    return found


def metric_positions(expr: str, metric: str) -> list[int]:
    """Where ``metric`` is selected in ``expr`` (not as a prefix of a longer name)."""
    pattern = rf"(?<![\w:]){re.escape(metric)}(?![\w:])"
    return [m.start() for m in re.finditer(pattern, expr)]


def aggregation_problems(expr: str) -> list[str]:
    """What is wrong with how ``expr`` aggregates the replicas' series."""
    problems = []
    for gauge in DB_GAUGES:
        for pos in metric_positions(expr, gauge):
            aggs = enclosing_aggregations(expr, pos)
            if not aggs or aggs[0] != "max by (job)":
                problems.append(f"{gauge} must be inside `max by (job) (...)`, got {aggs}")
    for counter in COUNTERS:
        for pos in metric_positions(expr, counter):
            aggs = enclosing_aggregations(expr, pos)
            if not aggs or not aggs[0].startswith("sum"):
                problems.append(f"{counter} is per replica and must be summed, got {aggs}")
    return problems


@pytest.mark.parametrize(
    ("expr", "ok"),
    [
        ("max by (job) (pgsched_running_stale) > 0", True),
        ("max by (job) (delta(pgsched_failed_runs[15m])) > 0", True),
        (
            "time() - max by (job) (pgsched_last_success_timestamp_seconds)"
            " > 2 * max by(job)(pgsched_job_interval_seconds)",
            True,
        ),
        ("sum by (job) (increase(pgsched_leases_lost_total[15m])) > 0", True),
        ("pgsched_running_stale > 0", False),
        ("sum by (job) (pgsched_running_stale) > 0", False),
        ("max (pgsched_running_stale) > 0", False),
        ("max by (job, pod) (pgsched_failed_runs) > 0", False),
        ("max by (job) (sum by (job) (pgsched_failed_runs)) > 0", False),
        ("max(pgsched_running_stale) by (job) > 0", False),
        (
            "time() - max by (job) (pgsched_last_success_timestamp_seconds)"
            " > 2 * pgsched_job_interval_seconds",
            False,
        ),
        ("max by (job) (increase(pgsched_leases_lost_total[15m])) > 0", False),
        ("max by (job) (pgsched_running_stale_other) > 0", True),
    ],
)
def test_aggregation_check_itself(expr: str, ok: bool) -> None:
    assert (aggregation_problems(expr) == []) is ok


# -- the PrometheusRule's structure ----------------------------------------------------------


def test_prometheusrule_object() -> None:
    doc = _load_rule()
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    assert doc["kind"] == "PrometheusRule"
    assert doc["metadata"]["name"] == "pgsched"
    assert doc["metadata"]["labels"]["app.kubernetes.io/name"] == "pgsched"
    groups = doc["spec"]["groups"]
    assert groups and all(g["name"] and g["rules"] for g in groups)
    assert len({g["name"] for g in groups}) == len(groups)


def test_the_expected_alerts_exist_once() -> None:
    names = [r["alert"] for r in _alerts()]
    assert sorted(names) == sorted(EXPECTED_ALERTS)


@pytest.mark.parametrize("rule", _alerts(), ids=_alert_id)
def test_alert_has_severity_summary_description_runbook(rule: dict[str, Any]) -> None:
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    for key in ("summary", "description", "runbook"):
        assert isinstance(annotations.get(key), str), f"{rule['alert']}: no {key}"
        assert len(annotations[key].split()) >= 3, f"{rule['alert']}: {key} too short"
    runbook = annotations["runbook"]
    assert runbook.startswith("1. "), "the runbook is a list of numbered steps"
    assert re.search(r"`pgsched (status|runs|check|resume|trigger)\b", runbook), (
        f"{rule['alert']}: the runbook names no pgsched command to run"
    )


@pytest.mark.parametrize("rule", _alerts(), ids=_alert_id)
def test_replicas_are_aggregated(rule: dict[str, Any]) -> None:
    assert aggregation_problems(rule["expr"]) == []


def test_every_database_gauge_is_used() -> None:
    exprs = " ".join(r["expr"] for r in _alerts())
    for gauge in DB_GAUGES:
        assert metric_positions(exprs, gauge), f"no alert uses {gauge}"


@pytest.mark.parametrize("rule", _alerts(), ids=_alert_id)
def test_annotations_only_use_labels_the_alert_has(rule: dict[str, Any]) -> None:
    """A template label that the aggregation drops renders as "<no value>"."""
    expr = rule["expr"]
    if expr.startswith("absent("):
        allowed: set[str] | None = set()
    elif "by (" in expr or "by(" in expr:
        allowed = {
            name.strip()
            for group in re.findall(r"\bby\s*\(([^)]*)\)", expr)
            for name in group.split(",")
        } - {"le"}
    else:
        allowed = None  # no aggregation: the series keep all their target labels
    used = {
        name
        for text in rule["annotations"].values()
        for name in re.findall(r"\$labels\.(\w+)", text)
    }
    if allowed is not None:
        assert used <= allowed, f"{rule['alert']} uses {used - allowed}, has only {allowed}"


def test_promtool_tests_cover_every_alert() -> None:
    """Each alert has a case where it fires and one where it stays silent."""
    assert PROMTOOL_TESTS, "no promtool test files in deploy/prometheus/tests"
    fires: set[str] = set()
    silent: set[str] = set()
    for path in PROMTOOL_TESTS:
        for group in yaml.safe_load(path.read_text())["tests"]:
            for case in group.get("alert_rule_test", []):
                (fires if case.get("exp_alerts") else silent).add(case["alertname"])
    assert EXPECTED_ALERTS - fires == set(), "alerts never tested firing"
    assert EXPECTED_ALERTS - silent == set(), "alerts never tested silent"
    assert (fires | silent) - EXPECTED_ALERTS == set(), "tests of unknown alerts"


# -- promtool ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is not on PATH (it ships with Prometheus; Debian: prometheus)")
    return path


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """spec.groups of the PrometheusRule as a plain Prometheus rules file."""
    path = tmp_path_factory.mktemp("rules") / "pgsched-rules.yaml"
    groups = _load_rule()["spec"]["groups"]
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)


def test_promtool_check_rules(promtool: str, rules_file: Path) -> None:
    result = _run(promtool, "check", "rules", str(rules_file))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in result.stdout


@pytest.mark.parametrize("test_file", PROMTOOL_TESTS, ids=lambda p: p.name)
def test_promtool_test_rules(
    promtool: str, rules_file: Path, test_file: Path, tmp_path: Path
) -> None:
    spec = yaml.safe_load(test_file.read_text())
    spec["rule_files"] = [str(rules_file)]
    pointed = tmp_path / test_file.name
    pointed.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = _run(promtool, "test", "rules", str(pointed))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
