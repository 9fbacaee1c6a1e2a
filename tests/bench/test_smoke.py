"""The benchmark (``python -m bench``) with tiny numbers, so it cannot rot: pgsched, the seed
design and the raw limit, 3 replicas each, 20 scopes every 2 s, on the tests' database."""

from __future__ import annotations

import json
from pathlib import Path

from bench.run import main


def test_benchmark_smoke(pg_dsn: str, tmp_path: Path) -> None:
    argv = [
        "--dsn",
        pg_dsn,
        "--workloads",
        "a",
        "--schedulers",
        "raw,pgsched,seed",
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
    assert set(results) == {"raw", "pgsched", "seed"}
    for name, r in results.items():
        assert r["status"] == "ok", (name, r.get("reason"))
        assert r["due"] == 40, name
        assert r["duplicates"] == 0, name
        assert r["completed"] >= 20, (name, r["completed"])  # a loaded machine may miss one
        for key in ("lag_p50_s", "lag_p99_s", "lag_max_s", "plans_per_s", "peak_per_s"):
            assert r[key] is not None and r[key] >= 0, (name, key, r[key])
        assert r["statements_source"] in ("pg_stat_statements", "client"), name
        assert r["statements_per_tick"] > 0, name
        assert len(r["cpu_s"]) == 3 and len(r["peak_rss_mb"]) == 3, name
        assert all(m is not None and m > 0 for m in r["peak_rss_mb"]), name
        assert sum(r["replica_shares"].values()) > 0.99, name
    assert results["raw"]["claim_finish_rows_per_s"] is not None
    assert results["pgsched"]["ratio_to_limit"] is not None
    assert results["pgsched"]["completed"] == 40, results["pgsched"]
