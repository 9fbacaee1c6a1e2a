"""OpenTelemetry spans (docs/embedding.md), only with the ``otel`` extra installed: each
execution is a span ``pgsched.run`` on the globally set tracer provider, current while the
handler runs (its own spans nest under it), with error status when the run fails. Without the
extra nothing is imported and nothing is :func:`recording`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any, Protocol

from .._run import Run

try:
    from opentelemetry import trace as _trace
except ImportError:  # the otel extra is not installed
    _trace = None  # type: ignore[assignment]


class Told(Protocol):
    """What a span records of a run's outcome (the engine's ``Outcome`` has these)."""

    @property
    def status(self) -> str: ...
    @property
    def error_code(self) -> str | None: ...
    @property
    def error_msg(self) -> str | None: ...


Record = Callable[[Told | None], None]

# A proxy: it follows a tracer provider the application sets after importing pgsched.
_TRACER: Any = _trace.get_tracer("pgsched") if _trace is not None else None


def _nothing(outcome: Told | None) -> None:
    return None


def recording() -> bool:
    """Whether a span would be recorded: the extra is installed and a tracer provider set.
    Asked once per claim, not per run: while no provider is set the check reads the
    process environment (OpenTelemetry's provider variable)."""
    return _TRACER is not None and not isinstance(
        _trace.get_tracer_provider(), _trace.ProxyTracerProvider
    )


# Runs started while nothing records: every span would be a non-recording one, at a cost per run.
UNTRACED: AbstractContextManager[Record] = nullcontext(_nothing)


@contextmanager
def run_span(run: Run, claim: str, runs: int = 1) -> Iterator[Record]:
    """A span around one execution (when :func:`recording`), or a batch of ``runs`` that
    ``run`` heads; the caller records the outcome (a batch's first failure, else its first)
    through the yielded function (None: nothing was written by this replica, e.g. the lease
    was lost)."""
    attributes = {
        "pgsched.job": run.job,
        "pgsched.scope": str(run.scope),
        "pgsched.plan_time": run.plan_time.isoformat(),
        "pgsched.attempt": run.attempt,
        "pgsched.execution_id": str(run.execution_id),
        "pgsched.trigger": run.trigger,
        "pgsched.claim": claim,
        "pgsched.runner_id": run.runner_id,
    }
    if runs > 1:
        attributes["pgsched.batch_runs"] = runs
    with _TRACER.start_as_current_span(
        "pgsched.run",
        kind=_trace.SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:

        def record(outcome: Told | None) -> None:
            if outcome is None:  # written in the handler's transaction, or the lease was lost
                return
            span.set_attribute("pgsched.status", outcome.status)
            if outcome.status == "FAILED":
                span.set_attribute("pgsched.error_code", outcome.error_code or "")
                status = _trace.Status(_trace.StatusCode.ERROR, outcome.error_msg or "")
                span.set_status(status)
            else:
                span.set_status(_trace.Status(_trace.StatusCode.OK))

        yield record
