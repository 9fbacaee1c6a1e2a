"""The cluster every HTTP test of this package shares (``cluster.py``): started once per
worker, stopped (and checked to exit cleanly) when the package's tests are done."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.acceptance.http.cluster import Cluster, running_cluster


@pytest.fixture(scope="package")
def cluster(pg_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(pg_dsn, tmp_path_factory.mktemp("http")) as started:
        yield started
