"""The overview, an execution's page and the login form, as HTML (``html`` for the frame)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..._operations.audit import Action
from ..._operations.dashboard import COUNT_CAP
from ..._structures import (
    ActionRecord,
    Execution,
    FailedAttempt,
    JobStatus,
    LiveReplica,
    PlanSummary,
    RunHistory,
    attempt_text,
)
from .html import (
    button_form,
    duration,
    esc,
    hidden,
    hidden_pairs,
    href,
    num,
    pick,
    pill,
    section,
    selection_form,
    table,
    when,
)


@dataclass(frozen=True, slots=True)
class Overview:
    """What the overview shows."""

    jobs: Sequence[JobStatus]
    strips: Mapping[str, Sequence[PlanSummary]]
    replicas: Sequence[LiveReplica]
    stale: Sequence[Execution]
    failures: Sequence[FailedAttempt]
    recent: Sequence[Execution]
    actions: Sequence[ActionRecord]
    runner_id: str | None


def strip(job: str, plans: Sequence[PlanSummary]) -> str:
    """The job's recent plans, oldest first, one square each coloured by its worst state."""
    cells = "".join(
        f'<a class="sq {p.outcome}" href="{href("job", name=job)}" '
        f'title="{esc(_plan_title(p))}"><span class="visually-hidden">'
        f"{esc(_plan_title(p))}</span></a>"
        for p in reversed(plans)
    )
    return f'<div class="strip" aria-label="recent plans of {esc(job)}">{cells or "—"}</div>'


def _plan_title(p: PlanSummary) -> str:
    counts = [
        f"{n} {name}"
        for name, n in (
            ("success", p.success),
            ("failed", p.failed),
            ("running", p.running),
            ("stale", p.stale),
            ("pending", p.pending),
            ("cancelled", p.cancelled),
        )
        if n
    ]
    return f"{p.plan_time.isoformat()}: {p.outcome} ({', '.join(counts) or 'no runs'})"


def overview(data: Overview, *, can_act: bool) -> str:
    totals = {
        name: sum(getattr(j, name) for j in data.jobs)
        for name in ("running", "stale", "failed", "pending")
    }
    tiles = "".join(
        f'<div class="tile"><b class="{"bad" if name in ("stale", "failed") and n else ""}">'
        f"{_total(n, data.jobs, name)}</b><span>{esc(label)}</span></div>"
        for name, label, n in (
            ("jobs", "jobs", len(data.jobs)),
            ("running", "running", totals["running"]),
            ("stale", "stale leases", totals["stale"]),
            ("failed", "failed, no retry left", totals["failed"]),
            ("pending", "pending", totals["pending"]),
            ("replicas", "live replicas", len(data.replicas)),
        )
    )
    parts = [f'<div class="tiles" id="tiles" role="list">{tiles}</div>', _jobs(data, can_act)]
    parts += [_replicas(data.replicas), stale_leases(data.stale), failures(data.failures)]
    parts += [recent_runs(data.recent), actions_log(data.actions)]
    return "".join(parts)


def _total(n: int, jobs: Sequence[JobStatus], name: str) -> str:
    """A sum of per-job counts; "+" when one of them stopped at the cap."""
    capped = name in ("running", "stale", "failed", "pending") and any(
        getattr(j, name) > COUNT_CAP for j in jobs
    )
    return f"{n:,}+" if capped else f"{n:,}"


def job_state(j: JobStatus) -> str:
    """A job's state cell: paused, no live replica to run it, or active."""
    if j.paused:
        return '<span class="pill paused">paused</span>'
    return "active" if j.live else '<span class="pill paused">no live replica</span>'


def _jobs(data: Overview, can_act: bool) -> str:
    headers = ["job", "schedule", "next plan", "state", "recent plans"]
    headers += ["running", "stale", "failed", "pending"]
    if can_act:
        headers = ["select", *headers, "actions"]
    rows = []
    for j in data.jobs:
        state = job_state(j)
        row = [
            f'<a href="{href("job", name=j.job)}"><strong>{esc(j.job)}</strong></a>',
            esc(j.schedule or "—") + _dynamic(j),
            when(j.next_plan),
            state,
            strip(j.job, data.strips.get(j.job, ())),
            num(j.running),
            num(j.stale, bad=True),
            num(j.failed, bad=True),
            num(j.pending),
        ]
        if can_act:
            flip = Action.RESUME if j.paused else Action.PAUSE
            row.append(
                button_form(Action.TRIGGER, "Run now", "./", job=j.job, all_scopes="1")
                + " "
                + button_form(flip, flip.capitalize(), "./", job=j.job)
            )
            row.insert(0, pick("bulk-jobs", j.job, j.job))
        rows.append(row)
    shift = 1 if can_act else 0
    numeric = frozenset(i + shift for i in (5, 6, 7, 8))
    body = table(headers, rows, numeric=numeric, wide=frozenset({1 + shift}))
    if can_act and rows:
        buttons = [("pause", "Pause selected"), ("resume", "Resume selected")]
        body += selection_form("bulk-jobs", "./", buttons)
    return section("Jobs", f"{len(data.jobs)} known", body, "jobs")


def _dynamic(j: JobStatus) -> str:
    if j.schedules is None:
        return ""
    text = f"{num(j.schedules)} schedules, {num(j.schedules_paused or 0)} paused"
    link = href("schedules", name=j.job)
    return f'<br><small class="schedules"><a href="{link}">{text}</a></small>'


def _replicas(replicas: Sequence[LiveReplica]) -> str:
    headers = ["runner", "host", "version", "started", "last seen", "HTTP", "jobs"]
    rows = [
        [
            f"<strong>{esc(r.runner_id)}</strong>",
            esc(r.host),
            esc(r.version),
            when(r.started_at),
            when(r.seen_at),
            esc(r.http_address or "—"),
            f'<span class="mono">{esc(", ".join(r.jobs))}</span>',
        ]
        for r in replicas
    ]
    body = table(headers, rows, wide=frozenset({2, 3, 5}))
    return section("Replicas", f"{len(replicas)} live", body, "replicas")


def run_link(run_id: object, text: str) -> str:
    return f'<a href="{href("run", id=run_id)}">{text}</a>'


def stale_leases(runs: Sequence[Execution]) -> str:
    headers = ["job", "scope", "plan time", "attempt", "runner", "last heartbeat", "stale since"]
    rows = [
        [
            esc(r.job),
            run_link(r.id, esc(str(r.scope)[:120])),
            when(r.plan_time),
            str(r.attempt),
            esc(r.runner_id or ""),
            when(r.heartbeat_at),
            when(r.stale_after),
        ]
        for r in runs
    ]
    note = "RUNNING past stale_after: the holder stopped heartbeating"
    return section("Stale leases", note, table(headers, rows), "stale")


def failures(items: Sequence[FailedAttempt]) -> str:
    headers = ["job", "scope", "plan time", "attempt", "error", "message", "then"]
    rows = [
        [
            esc(r.job),
            run_link(r.execution_id, esc(str(r.scope)[:120])),
            when(r.plan_time),
            attempt_text(r.attempt, r.max_attempts),
            esc(r.error_code or ""),
            f'<span class="mono">{esc(r.error_msg or "")}</span>',
            _then(r),
        ]
        for r in items
    ]
    note = "newest first; failed attempts of runs that were retried included"
    return section("Recent failures", note, table(headers, rows, wide=frozenset({2})), "failures")


def _then(r: FailedAttempt) -> str:
    if r.latest:
        return when(r.next_retry_at) if r.next_retry_at else "no retry left"
    return f"retried: {pill(r.execution_status)} on attempt {r.execution_attempt}"


def recent_runs(runs: Sequence[Execution]) -> str:
    headers = ["job", "scope", "plan time", "trigger", "status", "attempt", "runner", "duration"]
    rows = [
        [
            esc(r.job),
            run_link(r.id, esc(str(r.scope)[:120])),
            when(r.plan_time),
            esc(r.trigger),
            pill("STALE" if r.stale else r.status),
            attempt_text(r.attempt, r.max_attempts),
            esc(r.runner_id or ""),
            duration(r.duration_ms),
        ]
        for r in runs
    ]
    body = table(headers, rows, numeric=frozenset({7}), wide=frozenset({3, 6}))
    return section("Recent runs", "newest plan first", body, "recent")


def actions_log(items: Sequence[ActionRecord]) -> str:
    headers = ["when", "surface", "who", "action", "job", "target", "outcome"]
    rows = [
        [
            when(a.at),
            esc(a.surface or ""),
            esc(a.actor),
            esc(a.action),
            esc(a.job or ""),
            f'<span class="mono">{esc(_action_target(a))}</span>',
            esc(a.outcome) + (f': <span class="mono">{esc(a.detail)}</span>' if a.detail else ""),
        ]
        for a in items
    ]
    return section("Actions", "who did what, newest first", table(headers, rows), "actions")


def _action_target(a: ActionRecord) -> str:
    """What an action was applied to, with its ``at`` (a trigger's) when it had one."""
    text = a.target or ""
    at = (a.details or {}).get("at")
    return f"{text} at {at}" if at else text


def run_page(found: RunHistory, *, can_act: bool, back: str) -> str:
    r = found.execution
    status = "STALE" if r.stale else r.status
    facts = [
        ("job", f'<a href="{href("job", name=r.job)}">{esc(r.job)}</a>'),
        ("scope", esc(str(r.scope))),
        ("plan time", when(r.plan_time)),
        ("trigger", esc(r.trigger)),
        ("status", pill(status)),
        ("attempt", attempt_text(r.attempt, r.max_attempts)),
        ("runner", esc(r.runner_id or "—")),
        ("fencing token", str(r.fencing_token)),
        ("started", when(r.started_at)),
        ("finished", when(r.finished_at)),
        ("duration", duration(r.duration_ms)),
        ("next retry", when(r.next_retry_at)),
        ("rows", num(r.rows_affected)),
        ("error", esc(r.error_code or "—")),
        ("message", f'<span class="mono">{esc(r.error_msg or "—")}</span>'),
        ("result", _json_cell(r.result)),
        *([("payload", _json_cell(r.payload))] if r.payload is not None else []),
        ("id", f'<span class="mono">{esc(r.id)}</span>'),
    ]
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in facts)
    acts = ""
    if can_act and r.status == "PENDING":
        acts = button_form(Action.CANCEL, "Cancel", back, danger=True, id=r.id, job=r.job)
    elif can_act and r.status == "FAILED":
        acts = button_form(Action.RETRY, "Retry now", back, id=r.id, job=r.job)
    top = section("Execution", "", f'<dl class="kv">{dl}</dl>' + _bar(acts), "execution")
    return top + attempts(found)


def _json_cell(value: object) -> str:
    """A stored JSON value (a run's result, a schedule's payload), indented and escaped."""
    return f'<pre class="mono">{esc(json.dumps(value, indent=2, sort_keys=True))}</pre>'


def _bar(content: str) -> str:
    return f'<div class="pager">{content}</div>' if content else ""


def attempts(found: RunHistory) -> str:
    headers = ["#", "runner", "fencing token", "started", "finished", "status", "error"]
    rows = [
        [
            str(a.attempt),
            esc(a.runner_id or "—"),
            str(a.fencing_token),
            when(a.started_at),
            when(a.finished_at),
            pill(a.status),
            esc(a.error_code or "")
            + (f"<pre>{esc(a.error_msg)}</pre>" if a.error_msg else "")
            + (
                f"<details><summary>traceback</summary><pre>{esc(a.traceback)}</pre></details>"
                if a.traceback
                else ""
            ),
        ]
        for a in found.attempts
    ]
    return section("Attempts", "in order", table(headers, rows), "attempts")


def login_page(message: str, back: str) -> str:
    note = f'<p class="flash error" role="alert">{esc(message)}</p>' if message else ""
    form = (
        f'{note}<form class="bar" method="post" action="login">{hidden(back=back)}'
        '<label for="token">Token<input id="token" name="token" type="password" '
        'autocomplete="current-password" required size="40"></label>'
        '<button type="submit">Sign in</button></form>'
        '<p class="empty">The operator token (PGSCHED_HTTP_TOKEN) may act; the viewer token '
        "(PGSCHED_HTTP_VIEW_TOKEN) may read. It is kept in an HttpOnly cookie.</p>"
    )
    return section("Sign in", "", form, "login")


def message_page(title: str, text: str) -> str:
    return section(title, "", f'<p class="empty">{esc(text)}</p>', "message")


def confirm_page(form: Mapping[str, Sequence[str]], what: str, back: str) -> str:
    """Asks before a destructive action: the posted ``form`` again, with ``confirmed``."""
    fields = hidden_pairs((k, v) for k, values in form.items() if k != "confirmed" for v in values)
    return section(
        "Confirm",
        "",
        f'<div class="pager">{esc(what)} This cannot be undone.</div>'
        f'<div class="pager"><form class="inline" method="post" action="action">{fields}'
        '<input type="hidden" name="confirmed" value="yes">'
        '<button class="danger" type="submit">Yes, delete</button></form>'
        f'<a href="{esc(back)}">Cancel</a></div>',
        "confirm",
    )
