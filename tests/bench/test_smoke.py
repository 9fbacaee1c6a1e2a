"""The benchmark (``python -m bench``) with tiny numbers, so it cannot rot: pgsched, the seed
design, the raw limit and the limit with a Python handler, 3 replicas each, 20 scopes every
2 s, on the tests' database; and the report rendered from its results."""

from __future__ import annotations

import json
from pathlib import Path

from bench import report as report_mod
from bench.registry import REGISTRY
from bench.run import main


def test_benchmark_smoke(pg_dsn: str, tmp_path: Path) -> None:
    argv = [
        "--dsn",
        pg_dsn,
        "--workloads",
        "a",
        "--schedulers",
        "raw,raw_handler,pgsched,seed",
        "--scopes",
        "20",
        "--every",
        "2",
        "--periods",
        "2",
        "--warmup",
        "3",
        "--results-dir",
        str(tmp_path),
        "--no-docs",
        "--no-install",
    ]
    assert main(argv) == 0
    report = json.loads((tmp_path / "latest.json").read_text())
    assert report["machine"]["cores"] >= 1
    results = {r["scheduler"]: r for r in report["results"]}
    assert set(results) == {"raw", "raw_handler", "pgsched", "seed"}
    for name, r in results.items():
        assert r["status"] == "ok", (name, r.get("reason"))
        assert r["due"] == 40, name
        assert r["duplicates"] == 0, name
        # half the plans run by one 2 s period after the last was due (a loaded machine may
        # miss one): a guard against an order-of-magnitude regression, not a performance claim
        # (the benchmark's real runs make those: docs/performance.md)
        assert r["completed"] >= 20, (name, r["completed"])
        for key in ("lag_p50_s", "lag_p99_s", "lag_max_s", "plans_per_s", "peak_per_s"):
            assert r[key] is not None and r[key] >= 0, (name, key, r[key])
        assert r["statements_source"] in ("pg_stat_statements", "client"), name
        assert r["statements_per_tick"] > 0, name
        assert len(r["cpu_s"]) == 3 and len(r["peak_rss_mb"]) == 3, name
        assert all(m is not None and m > 0 for m in r["peak_rss_mb"]), name
        assert sum(r["replica_shares"].values()) > 0.99, name
    assert results["raw"]["claim_finish_rows_per_s"] is not None
    assert results["raw_handler"]["claim_finish_rows_per_s"] is not None
    mine = results["pgsched"]
    for key in ("ratio_to_limit", "ratio_to_handler_limit", "fanout_to_limit"):
        assert mine[key] is not None and mine[key] > 0, (key, mine.get(key))
    assert "fanout_to_handler_limit" in mine
    assert results["raw_handler"]["ratio_to_handler_limit"] == 1.0
    # every plan run by one 2 s period after the last was due (pgsched's p99 start lag in
    # workload a is ~0.16 s): a guard against an order-of-magnitude regression, not a
    # performance claim (the benchmark's real runs make those: docs/performance.md)
    assert mine["completed"] == 40, mine
    page = report_mod.render(report, chart=False, notes="")
    assert REGISTRY["raw_handler"].label in page
    assert "× handler limit" in page and "pgsched against both limits" in page


def test_pgsched_statements_are_named_from_queries_sql() -> None:
    from bench.measure import pgsched_queries, pgsched_statement

    assert {"tick_probe", "claim_cursors", "finish", "claim_begin"} <= set(pgsched_queries())
    assert pgsched_statement(
        "SELECT pg_try_advisory_xact_lock(hashtextextended($1, $2)) AS locked"
    ) == ("try_lock_job")
    assert pgsched_statement("SELECT 1") is None


def test_schedules_as_data_smoke(pg_dsn: str, tmp_path: Path) -> None:
    """Workloads g (bulk put, then idle) and i (churn) for pgsched with tiny numbers: 60
    schedules, a 3-s window, 60 operations a second; h waits for a minute boundary, so it is
    left to real runs. The report gets its schedules-as-data table and goals."""
    argv = [
        "--dsn",
        pg_dsn,
        "--workloads",
        "g,i",
        "--schedulers",
        "pgsched",
        "--scopes",
        "60",
        "--window",
        "3",
        "--churn-per-s",
        "60",
        "--warmup",
        "1",
        "--results-dir",
        str(tmp_path),
        "--work-dir",
        str(tmp_path / "work"),
        "--no-docs",
        "--no-install",
    ]
    assert main(argv) == 0
    report = json.loads((tmp_path / "latest.json").read_text())
    results = {r["workload"]: r for r in report["results"]}
    assert set(results) == {"g", "i"}
    for key, r in results.items():
        assert r["status"] == "ok", (key, r.get("reason"))
        assert r["scheduler"] == "pgsched" and r["schedules"] == 60, key
        assert r["put_schedules"] == 60 and r["put_per_s"] > 0, key
        assert r["duplicates"] == 0, key
        assert r["statements_per_tick"] is not None, key
        assert all(m is not None and m > 0 for m in r["peak_rss_mb"]), key
    churn = results["i"]
    assert churn["churn_ops"] > 0 and churn["churn_deletes"] > 0, churn
    assert churn["stale_claims"] == 0, churn["stale_examples"]
    # every due plan must have run by the end of the drain (no new execution for 4 s): a guard
    # against an order-of-magnitude regression, not a performance claim (docs/performance.md)
    assert churn["churn_missed"] == 0, churn
    page = report_mod.render(report, chart=False, notes="")
    assert "Schedules as data (one dynamic job" in page
    assert "(g) bulk put through Admin.put_schedules" in page
    assert "(i) under churn: zero double runs" in page


def test_churn_check_flags_a_stale_plan(tmp_path: Path) -> None:
    """A plan of the old cadence claimed after the replacement committed is stale; one
    claimed while the replacement was in flight is not (doubt counts for the scheduler)."""
    from bench.churn import Version, allowed, candidates

    history = [Version(0.0, 1.0, 10), Version(100.0, 100.5, 15)]
    late = candidates(history, 101.0, 101.2)
    assert late == [history[1]] and not any(allowed(v, 100.0) for v in late)
    in_flight = candidates(history, 100.2, 100.3)
    assert any(allowed(v, 100.0) for v in in_flight)
    assert any(allowed(v, 105.0) for v in late)  # the new cadence's first plan after the put
    assert not allowed(Version(100.0, 100.5, None), 105.0)  # deleted


def test_history_smoke(pg_dsn: str, tmp_path: Path) -> None:
    """Workload (j) in small: a live fan-out measured on an empty ledger, then with 20,000
    rows of history over two days, then while retention drops the oldest day, which must
    take that day's rows and nothing else."""
    from bench.history import main as history

    argv = ["--dsn", pg_dsn, "--scopes", "50", "--every", "2", "--warmup", "1", "--window", "4"]
    argv += ["--rows", "20000", "--days", "2", "--reads", "2", "--results-dir", str(tmp_path)]
    assert history(argv) == 0
    (written,) = tmp_path.glob("history-*.json")
    result = json.loads(written.read_text())
    assert result["history"]["rows"] == 20000
    for phase in (result["empty"], result["full"], result["retention"]["window"]):
        assert phase["start"]["runs"] > 0
        assert all(ms > 0 for ms in phase["reads_ms"].values()), phase["reads_ms"]
    assert result["full"]["ledger_rows"] >= 20000 + result["empty"]["ledger_rows"]
    assert "deleted 10000 finished run(s)" in result["retention"]["prune"]["output"]
    assert set(result["ratios"]) >= set(result["full"]["reads_ms"])


def test_ledger_smoke(pg_dsn: str, tmp_path: Path) -> None:
    """``python -m bench.ledger`` in small: WAL per execution of a live fan-out (by relation
    where the server has pg_walinspect), bytes per row at rest, and retention."""
    from bench.ledger import main as ledger

    argv = ["--dsn", pg_dsn, "--scopes", "50", "--every", "2", "--warmup", "3", "--settle", "1"]
    argv += ["--window", "4", "--rows", "5000", "--results-dir", str(tmp_path)]
    assert ledger(argv) == 0
    (written,) = tmp_path.glob("ledger-*.json")
    result = json.loads(written.read_text())
    live = result["live"]
    assert live["executions"] > 0 and live["wal_records_per_execution"] > 0, live
    by_relation = live["wal_records_by_relation"]
    if by_relation is not None:  # pg_walinspect: the ledger's own heap is among the relations
        assert any(r["relation"].startswith("cron_executions_") for r in by_relation), by_relation
    assert result["at_rest"]["bytes_per_row"] > 0, result["at_rest"]
    assert "deleted 5000 finished run(s)" in result["retention"]["output"], result["retention"]
