"""The read-only HTML status page: jobs, stale leases, recent failures and recent runs."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any

from .._views import Execution, FailedAttempt, JobStatus

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;
background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:14px 24px;display:flex;align-items:baseline;gap:16px}
header h1{font-size:18px;margin:0}header span{color:#aab2c0;font-size:13px}
main{padding:16px 24px;max-width:1400px}
section{background:#fff;border:1px solid #dfe3ea;border-radius:8px;margin:0 0 18px;
overflow-x:auto}
h2{font-size:15px;margin:0;padding:10px 14px;border-bottom:1px solid #dfe3ea}
h2 small{color:#6b7385;font-weight:normal}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:6px 14px;border-bottom:1px solid #eef0f4;white-space:nowrap}
th{font-size:12px;color:#6b7385;font-weight:600;background:#fafbfc}
td.num{text-align:right;font-variant-numeric:tabular-nums}
td.err{white-space:normal;max-width:520px;font-family:ui-monospace,monospace;font-size:12px}
.pill{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600}
.SUCCESS{background:#dcf5e3;color:#17652f}.FAILED{background:#fde2e1;color:#9b1c17}
.RUNNING{background:#dde9fd;color:#1d4fa3}.PENDING{background:#fff1c9;color:#7a5a00}
.CANCELLED{background:#eceef2;color:#4d5566}.STALE{background:#ffd8b5;color:#8a3b00}
.paused{background:#eceef2;color:#4d5566}.bad{color:#9b1c17;font-weight:600}
.empty{padding:12px 14px;color:#6b7385}
"""


def render_status_page(
    *,
    jobs: Sequence[JobStatus],
    recent: Sequence[Execution],
    failures: Sequence[FailedAttempt],
    stale_leases: Sequence[Execution],
    runner_id: str,
) -> str:
    """The whole page as HTML; every value from the database is escaped."""
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    sections = [_jobs(jobs), _stale_leases(stale_leases), _failures(failures), _recent(recent)]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="refresh" content="10">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>pgsched status</title><style>{_STYLE}</style></head><body>"
        f"<header><h1>pgsched</h1><span>replica {escape(runner_id)} · {now}"
        " · refreshes every 10 s</span></header>"
        f"<main>{''.join(sections)}</main></body></html>"
    )


def _jobs(jobs: Sequence[JobStatus]) -> str:
    headers = ["job", "schedule", "state", "last plan", "last status", "last success"]
    headers += ["running", "stale", "failed", "pending"]
    rows = [
        [
            _b(r.job),
            _t(r.schedule or "—") + _dynamic_counts(r),
            '<span class="pill paused">paused</span>' if r.paused else "active",
            _time(r.last_plan),
            _status(r.last_status),
            _time(r.last_success),
            _num(r.running),
            _num(r.stale, bad=True),
            _num(r.failed, bad=True),
            _num(r.pending),
        ]
        for r in jobs
    ]
    return _section("Jobs", f"{len(jobs)} registered", headers, rows, numeric={6, 7, 8, 9})


def _dynamic_counts(job: JobStatus) -> str:
    """A dynamic job's schedules: how many, how many paused, the next plan due."""
    if job.schedules is None:
        return ""
    text = f"{job.schedules} schedules, {job.schedules_paused or 0} paused"
    text += f", next due {_time(job.next_due)}" if job.next_due is not None else ", none due"
    return f'<br><small class="schedules">{_t(text)}</small>'


def _stale_leases(runs: Sequence[Execution]) -> str:
    headers = ["job", "scope", "plan time", "attempt", "runner", "last heartbeat", "stale since"]
    rows = [
        [
            *_where(r),
            _num(r.attempt),
            _t(r.runner_id),
            _time(r.heartbeat_at),
            _time(r.stale_after),
        ]
        for r in runs
    ]
    note = "RUNNING past stale_after: the holder stopped heartbeating"
    return _section("Stale leases", note, headers, rows)


def _failures(failures: Sequence[FailedAttempt]) -> str:
    headers = ["job", "scope", "plan time", "attempt", "runner", "error", "message", "then"]
    rows = [
        [
            *_where(r),
            f"{r.attempt}/{r.max_attempts}",
            _t(r.runner_id or ""),
            _t(r.error_code or ""),
            f'<td class="err">{escape(str(r.error_msg or ""))}</td>',
            _then(r),
        ]
        for r in failures
    ]
    note = "newest first; failed attempts of runs that were retried included"
    return _section("Recent failures", note, headers, rows)


def _then(r: FailedAttempt) -> str:
    """What came of a failed attempt: its retry, none, or how its execution went on."""
    if r.latest:
        return _time(r.next_retry_at) if r.next_retry_at else "no retry left"
    return f"retried: {_status(r.execution_status)} on attempt {r.execution_attempt}"


def _recent(recent: Sequence[Execution]) -> str:
    headers = ["job", "scope", "plan time", "trigger", "status", "attempt", "runner"]
    headers += ["duration", "rows"]
    rows = [
        [
            *_where(r),
            _t(r.trigger),
            _status("STALE" if r.stale else r.status),
            f"{r.attempt}/{r.max_attempts}",
            _t(r.runner_id or ""),
            _duration(r.duration_ms),
            _num(r.rows_affected),
        ]
        for r in recent
    ]
    return _section("Recent runs", "newest first", headers, rows, numeric={8})


def _section(
    title: str,
    note: str,
    headers: Iterable[str],
    rows: Sequence[Sequence[str]],
    numeric: set[int] | None = None,
) -> str:
    head = f"<h2>{escape(title)} <small>{escape(note)}</small></h2>"
    if not rows:
        return f'<section>{head}<div class="empty">none</div></section>'
    numeric = numeric or set()
    ths = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(
            cell
            if cell.startswith("<td")
            else f"<td{' class=num' if i in numeric else ''}>{cell}</td>"
            for i, cell in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    table = f"<table><thead><tr>{ths}</tr></thead><tbody>{body}</tbody></table>"
    return f"<section>{head}{table}</section>"


def _t(value: Any) -> str:
    return escape(str(value))


def _b(value: Any) -> str:
    return f"<strong>{escape(str(value))}</strong>"


def _where(row: Execution | FailedAttempt) -> list[str]:
    """The job, scope and plan time cells of an execution."""
    return [_t(row.job), _scope(row), _time(row.plan_time)]


def _scope(row: Execution | FailedAttempt) -> str:
    return escape(str(row.scope)[:120])


def _time(value: datetime | None) -> str:
    return "—" if value is None else escape(value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"))


def _status(value: str | None) -> str:
    return "—" if value is None else f'<span class="pill {escape(value)}">{escape(value)}</span>'


def _num(value: int | None, bad: bool = False) -> str:
    if value is None:
        return "—"
    return f'<span class="bad">{value}</span>' if bad and value else str(value)


def _duration(ms: int | None) -> str:
    if ms is None:
        return "—"
    return f"{ms} ms" if ms < 10_000 else f"{ms / 1000:.1f} s"
