"""A job's page (grid of recent plans by scope, charts, upcoming plans, failures, actions) and
a dynamic job's schedules, as HTML."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from ..._operations.audit import Action
from ..._operations.dashboard import JobGrid, SchedulePage
from ..._structures import (
    ActionRecord,
    Execution,
    JobStatus,
    PlanSummary,
    Schedule,
    Scope,
    UpcomingPlan,
    attempt_text,
)
from ..._times import format_duration
from .charts import line_chart
from .html import (
    button_form,
    esc,
    hidden,
    href,
    num,
    pick,
    section,
    selection_form,
    short_time,
    table,
    when,
)
from .pages import actions_log, job_state, run_link


@dataclass(frozen=True, slots=True)
class JobView:
    """What a job's page shows."""

    job: JobStatus
    grid: JobGrid
    history: Sequence[PlanSummary]
    upcoming: Sequence[UpcomingPlan]
    pending: Sequence[Execution]
    failures: Sequence[Execution]
    actions: Sequence[ActionRecord]
    search: str
    back: str


def job_page(v: JobView, *, can_act: bool) -> str:
    j = v.job
    state = job_state(j)
    facts = [
        ("schedule", esc(j.schedule or "—")),
        ("state", state),
        ("next plan", when(j.next_plan)),
        (
            "running / stale / failed / pending",
            " / ".join(num(n) for n in (j.running, j.stale, j.failed, j.pending)),
        ),
    ]
    if j.schedules is not None:
        link = href("schedules", name=j.job)
        facts.append(
            (
                "schedules",
                f'<a href="{link}">{num(j.schedules)} ({num(j.schedules_paused)} paused)</a>',
            )
        )
    dl = "".join(f"<dt>{esc(k)}</dt><dd>{val}</dd>" for k, val in facts)
    parts = [
        section(
            j.job, "job", f'<dl class="kv">{dl}</dl>' + (_controls(v) if can_act else ""), "job"
        )
    ]
    parts += [_grid(v, can_act), _charts(v.history), _upcoming(v, can_act), _failures(v, can_act)]
    parts.append(actions_log(v.actions))
    return "".join(parts)


def _controls(v: JobView) -> str:
    job, back = v.job.job, v.back
    flip = Action.RESUME if v.job.paused else Action.PAUSE
    return (
        f'<form class="bar" method="post" action="action" aria-label="trigger {esc(job)}">'
        f"{hidden(action=Action.TRIGGER, job=job, back=back)}"
        '<label for="t-scope">Scope (KIND:ID)<input id="t-scope" name="scope" '
        'placeholder="global:global"></label>'
        '<label for="t-at">At (UTC, empty: now)<input id="t-at" name="at" '
        'type="datetime-local" step="1"></label>'
        '<label for="t-all"><span>All scopes</span><input id="t-all" name="all_scopes" '
        'type="checkbox" value="1"></label>'
        '<button type="submit">Trigger</button></form>'
        f'<div class="pager">{button_form(flip, flip.capitalize() + " job", back, job=job)}</div>'
    )


def _grid(v: JobView, can_act: bool) -> str:
    g, job = v.grid, v.job.job
    plans = list(reversed(g.plans))  # oldest on the left
    search = (
        '<form class="bar" method="get" action="job" role="search">'
        f"{hidden(name=job)}"
        '<label for="q">Scope starts with (KIND:ID or ID)'
        f'<input id="q" name="q" value="{esc(v.search)}" size="30"></label>'
        '<button type="submit">Search</button></form>'
    )
    heads = "".join(
        f'<th scope="col" class="plan" title="{esc(p.plan_time.isoformat())}">'
        f"{short_time(p.plan_time).replace(' ', '<br>')}</th>"
        for p in plans
    )
    pick = '<th scope="col"><span class="visually-hidden">select</span></th>' if can_act else ""
    rows = "".join(_grid_row(g, s, plans, can_act) for s in g.scopes)
    body = (
        f'<table class="grid"><thead><tr>{pick}<th scope="col" class="scope">scope</th>'
        f"{heads}</tr></thead><tbody>{rows}</tbody></table>"
        if g.scopes and plans
        else '<div class="empty">no runs match</div>'
    )
    if can_act and g.scopes:
        body = (
            f'<form method="post" action="action">{hidden(job=job, back=v.back)}'
            f'<div style="overflow-x:auto">{body}</div><div class="pager">'
            '<button type="submit" name="action" value="trigger">Trigger selected scopes</button>'
            "</div></form>"
        )
    else:
        body = f'<div style="overflow-x:auto">{body}</div>'
    pager = []
    if g.next_after is not None:
        nxt = href("job", name=job, q=v.search, after=str(g.next_after))
        pager.append(f'<a href="{nxt}">next scopes →</a>')
    if g.older_than is not None:
        old = href("job", name=job, q=v.search, before=g.older_than.isoformat())
        pager.append(f'<a href="{old}">older plans →</a>')
    pager.append(f'<a href="{href("job", name=job)}">latest</a>')
    note = f"{_n(len(g.scopes), 'scope')} × {_n(len(plans), 'plan')}; each cell links to its run"
    pager.append(_LEGEND)
    grid = section("Recent plans by scope", note, search + body + _bar(" ".join(pager)), "grid")
    return grid + _spans(g, job)


def _spans(g: JobGrid, job: str) -> str:
    """The job's latest spans of skipped plans (pgsched explain tells them plan by plan)."""
    if not g.spans:
        return ""
    rows = [
        [
            esc(str(s.scope)),
            esc(s.reason),
            when(s.first_plan),
            when(s.last_plan),
            num(s.plans),
        ]
        for s in g.spans
    ]
    note = f"latest {len(g.spans)}; pgsched explain {job} tells each plan"
    headers = ["scope", "reason", "first plan", "last plan", "plans"]
    return section("Skipped plans", note, table(headers, rows, numeric=frozenset({4})), "skips")


_LEGEND = (
    '<span class="legend" aria-hidden="true">'
    + "".join(
        f'<span class="sq {s}" style="display:inline-block;width:12px;height:12px"></span> '
        f"{s.lower()} "
        for s in ("SUCCESS", "FAILED", "RUNNING", "STALE", "PENDING", "CANCELLED", "SKIPPED")
    )
    + "</span>"
)


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _grid_row(g: JobGrid, scope: Scope, plans: Sequence[PlanSummary], can_act: bool) -> str:
    name = str(scope)
    cells = []
    for p in plans:
        run = g.cells.get((scope, p.plan_time))
        if run is None:
            reason = g.skipped.get((scope, p.plan_time))
            if reason is None:
                cells.append('<td><span class="sq NONE" title="no run"></span></td>')
                continue
            label = f"{name} at {p.plan_time.isoformat()}: skipped ({reason})"
            cells.append(
                f'<td><span class="sq SKIPPED" title="{esc(label)}">'
                f'<span class="visually-hidden">{esc(label)}</span></span></td>'
            )
            continue
        status = "STALE" if run.stale else run.status
        label = f"{name} at {p.plan_time.isoformat()}: {status}, attempt {run.attempt}"
        cells.append(
            f'<td><a class="sq {status}" href="{href("run", id=run.id)}" title="{esc(label)}">'
            f'<span class="visually-hidden">{esc(label)}</span></a></td>'
        )
    pick = (
        f'<td><input type="checkbox" name="target" value="{esc(name)}" '
        f'aria-label="select {esc(name)}"></td>'
        if can_act
        else ""
    )
    shown = esc(name if len(name) <= 60 else name[:60] + "…")
    return f'<tr>{pick}<td class="scope" title="{esc(name)}">{shown}</td>{"".join(cells)}</tr>'


def _charts(history: Sequence[PlanSummary]) -> str:
    lag = line_chart("Start lag", [(p.plan_time, p.lag_p50_ms, p.lag_max_ms) for p in history])
    dur = line_chart(
        "Duration", [(p.plan_time, p.duration_p50_ms, p.duration_max_ms) for p in history]
    )
    note = (
        f"last {len(history)} plans; start lag is the first attempt's start minus its plan"
        " time, scheduled plans only (manual runs, backfills and retries start when told)"
    )
    return section(
        "Start lag and duration", note, f'<div class="charts">{lag}{dur}</div>', "charts"
    )


def _upcoming(v: JobView, can_act: bool) -> str:
    ahead = table(
        ["plan time", "scope"],
        [[when(u.plan_time), esc(u.scope or "every scope")] for u in v.upcoming],
    )
    rows = [
        [run_link(r.id, esc(str(r.scope)[:120])), when(r.plan_time), esc(r.trigger)]
        for r in v.pending
    ]
    headers = ["scope", "plan time", "trigger"]
    if can_act:
        headers = ["select", *headers]
        rows = [
            [pick("bulk-cancel", r.id, f"pending run of {r.scope}"), *row]
            for r, row in zip(v.pending, rows, strict=True)
        ]
    pending = table(headers, rows)
    if can_act and rows:
        pending += selection_form(
            "bulk-cancel", v.back, [("cancel", "Cancel selected")], job=v.job.job
        )
    return section("Upcoming plans", "next plans; pending runs below", ahead) + section(
        "Pending runs", "triggers, backfills and one-offs waiting", pending, "pending"
    )


def _failures(v: JobView, can_act: bool) -> str:
    headers = ["scope", "plan time", "attempt", "finished", "error", "message"]
    if can_act:
        headers = ["select", *headers, "action"]
    rows = []
    for r in v.failures:
        row = [
            run_link(r.id, esc(str(r.scope)[:120])),
            when(r.plan_time),
            attempt_text(r.attempt, r.max_attempts),
            when(r.finished_at),
            esc(r.error_code or ""),
            f'<span class="mono">{esc(r.error_msg or "")}</span>',
        ]
        if can_act:
            box = (
                f'<input type="checkbox" name="target" value="{esc(r.id)}" '
                f'aria-label="select failed run of {esc(str(r.scope))}">'
            )
            row = [
                box,
                *row,
                button_form(Action.RETRY, "Retry now", v.back, id=r.id, job=v.job.job),
            ]
        rows.append(row)
    body = table(headers, rows, wide=frozenset({2, 4} if can_act else {1, 3}))
    if can_act and rows:
        # The per-row buttons are forms of their own, so the selection's form wraps no form:
        # its checkboxes join it through their form attribute.
        body = body.replace('name="target"', 'form="bulk-retry" name="target"') + (
            f'<form id="bulk-retry" class="pager" method="post" action="action">'
            f"{hidden(job=v.job.job, back=v.back)}"
            '<button type="submit" name="action" value="retry">Retry selected</button></form>'
        )
    return section("Failures", "latest FAILED runs, newest first", body, "job-failures")


def _bar(content: str) -> str:
    return f'<div class="pager">{content}</div>'


def schedules_page(job: str, page: SchedulePage, *, search: str, back: str, can_act: bool) -> str:
    found = (
        '<form class="bar" method="get" action="schedules" role="search">'
        f"{hidden(name=job)}"
        '<label for="sq">Scope starts with (KIND:ID or ID)'
        f'<input id="sq" name="q" value="{esc(search)}" size="30"></label>'
        '<button type="submit">Search</button></form>'
    )
    headers = ["scope", "spec", "payload", "next plan", "state", "recent runs"]
    if can_act:
        headers = ["select", *headers, "actions"]
    rows = [_schedule_row(job, s, page, back, can_act) for s in page.schedules]
    body = table(headers, rows, wide=frozenset({3} if can_act else {2}))
    if can_act and rows:
        body = body.replace('name="target"', 'form="bulk-schedules" name="target"') + (
            f'<form id="bulk-schedules" class="pager" method="post" action="action">'
            f"{hidden(job=job, back=back)}"
            '<button type="submit" name="action" value="schedule_pause">Pause selected</button>'
            '<button type="submit" name="action" value="schedule_resume">Resume selected</button>'
            '<button class="danger" type="submit" name="action" value="schedule_delete">'
            "Delete selected</button></form>"
        )
    pager = [f'<a href="{href("job", name=job)}">job page</a>']
    if page.next_after is not None:
        nxt = href("schedules", name=job, q=search, after=str(page.next_after))
        pager.insert(0, f'<a href="{nxt}">next schedules →</a>')
    out = section(
        f"Schedules of {job}",
        f"{len(rows)} shown",
        found + body + _bar(" ".join(pager)),
        "schedules",
    )
    return out + (_put_form(job, back) if can_act else "")


def _schedule_row(job: str, s: Schedule, page: SchedulePage, back: str, can_act: bool) -> list[str]:
    spec = f"cron {s.cron}" if s.cron else f"every {_every(s.every)}"
    payload = json.dumps(s.payload, sort_keys=True)
    runs = page.runs.get(s.scope, [])
    squares = "".join(
        f'<a class="sq {"STALE" if r.stale else r.status}" href="{href("run", id=r.id)}" '
        f'title="{esc(r.plan_time.isoformat())}: {esc(r.status)}">'
        f'<span class="visually-hidden">{esc(r.status)}</span></a>'
        for r in reversed(runs)
    )
    row = [
        esc(str(s.scope)),
        esc(f"{spec} ({s.timezone})"),
        f'<span class="mono">{esc(payload[:300])}</span>',
        when(s.next_plan_time),
        '<span class="pill paused">paused</span>' if s.paused else "active",
        f'<div class="strip">{squares or "—"}</div>',
    ]
    if not can_act:
        return row
    name = str(s.scope)
    flip = Action.SCHEDULE_RESUME if s.paused else Action.SCHEDULE_PAUSE
    buttons = button_form(flip, "Resume" if s.paused else "Pause", back, job=job, scope=name)
    buttons += " " + button_form(
        Action.SCHEDULE_DELETE, "Delete", back, danger=True, job=job, scope=name
    )
    box = (
        f'<input type="checkbox" name="target" value="{esc(name)}" aria-label="select {esc(name)}">'
    )
    return [box, *row, f'<span class="acts">{buttons}</span>']


def _every(value: timedelta | None) -> str:
    """A cadence as written in a spec: ``90s``, ``15m``, ``1h30m``, ``2d``."""
    return "—" if value is None else format_duration(value)


def _put_form(job: str, back: str) -> str:
    fields = (
        '<label for="p-scope">Scope (KIND:ID)<input id="p-scope" name="scope" required></label>'
        '<label for="p-cron">Cron<input id="p-cron" name="cron" placeholder="0 9 * * *"></label>'
        '<label for="p-every">or every<input id="p-every" name="every" placeholder="15m" size="6">'
        "</label>"
        '<label for="p-tz">Time zone<input id="p-tz" name="timezone" value="UTC" size="14"></label>'
        '<label for="p-payload">Payload (JSON object)<input id="p-payload" name="payload" '
        'placeholder="{}" size="24"></label>'
        '<label for="p-starts">Starts at (UTC, empty: now)<input id="p-starts" name="starts_at" '
        'type="datetime-local" step="1"></label>'
        '<label for="p-ends">Ends at (UTC, empty: never)<input id="p-ends" name="ends_at" '
        'type="datetime-local" step="1"></label>'
        '<label for="p-paused"><span>Paused</span><input id="p-paused" name="paused" '
        'type="checkbox" value="1"></label>'
        '<label for="p-calendar">Calendar (a name, empty: none)<input id="p-calendar" '
        'name="calendar" size="10"></label>'
        '<label for="p-excluded">On an excluded day<select id="p-excluded" name="on_excluded">'
        '<option value="skip">skip</option><option value="next_working_day">next working day'
        '</option><option value="previous_working_day">previous working day</option>'
        "</select></label>"
    )
    form = (
        '<form class="bar" method="post" action="action">'
        f"{hidden(action=Action.SCHEDULE_PUT, job=job, back=back)}"
        f'{fields}<button type="submit">Put schedule</button></form>'
    )
    return section("Put a schedule", "create or replace one scope's schedule", form, "put")
