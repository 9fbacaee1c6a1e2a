"""OpenTelemetry spans with the ``otel`` extra (docs/embedding.md), seen through the SDK's
in-memory exporter: one ``pgsched.run`` span per execution, with error status when it fails,
and a stolen lease's run as its own span."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import pgsched
from tests.integration.conftest import SchedulerFactory
from tests.support.rows import db_now, floor_to, seed_running

_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    # The global provider can be set once per process; pgsched's tracer is a proxy that
    # follows it even though pgsched was imported first.
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _runs(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == "pgsched.run"]


def test_a_span_per_execution_with_its_attributes_and_status(
    make_scheduler: SchedulerFactory, migrated: str, spans: InMemorySpanExporter
) -> None:
    s = make_scheduler("traced")
    tracer = trace.get_tracer("the-app")

    @s.job(every="1d", scopes=[pgsched.Scope("tenant", "a")])
    async def fine(run: pgsched.Run) -> int:
        with tracer.start_as_current_span("the-handler's-own-work"):
            return 1

    @s.job(every="1d", max_attempts=1)
    def broken(run: pgsched.Run) -> None:
        raise RuntimeError("disk full")

    assert s.run_once().started == 2
    by_job = {span.attributes["pgsched.job"]: span for span in _runs(spans)}  # type: ignore[index]
    assert set(by_job) == {"fine", "broken"}
    ok, failed = by_job["fine"], by_job["broken"]
    assert ok.attributes is not None and failed.attributes is not None
    assert ok.status.status_code == StatusCode.OK
    assert ok.attributes["pgsched.scope"] == "tenant:a"
    assert ok.attributes["pgsched.attempt"] == 1
    assert ok.attributes["pgsched.trigger"] == "schedule"
    plan_time = ok.attributes["pgsched.plan_time"]
    assert isinstance(plan_time, str) and plan_time.endswith("+00:00")
    assert {"pgsched.execution_id"} <= set(ok.attributes)
    child = next(x for x in spans.get_finished_spans() if x.name == "the-handler's-own-work")
    assert child.parent is not None and child.parent.span_id == ok.context.span_id
    assert failed.status.status_code == StatusCode.ERROR
    assert "disk full" in (failed.status.description or "")
    assert failed.attributes["pgsched.error_code"] == "handler_error"


def test_a_stolen_lease_runs_in_a_span_of_its_own(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, spans: InMemorySpanExporter
) -> None:
    plan = floor_to(db_now(db), timedelta(days=1))
    seed_running(db, migrated, "resumable", plan, stale_in=-timedelta(seconds=1))
    s = make_scheduler("thief")
    s.register(lambda run: None, name="resumable", every="1d", allow_stale_reentry=True)
    assert s.run_once().stolen == 1
    (span,) = _runs(spans)
    assert span.attributes is not None
    assert span.attributes["pgsched.claim"] == "stole"
    assert span.attributes["pgsched.attempt"] == 2
    assert span.status.status_code == StatusCode.OK


def test_nothing_is_imported_without_the_extra() -> None:
    """pgsched's own import never pulls OpenTelemetry in: a fresh interpreter with the
    package hidden records no span and still runs a job's no-op span wrapper."""
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import pgsched, pgsched._telemetry.tracing as t\n"
        "assert t._TRACER is None\n"
        "assert not t.recording()\n"
        "with t.UNTRACED as record: record(None)\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
