"""``pgsched explain JOB``: what happened to each plan of a job (or of one scope), plan by
plan, consecutive skips folded into one line. Parses arguments and calls ``Admin``."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .._operations.requests import ExplainQuery, field_names
from .._structures import ExplainLine, Explanation
from .common import given, labels, send, utc_text


def add_explain_command(sub: Any) -> None:
    p = sub.add_parser("explain", help="why each plan of JOB ran or did not, plan by plan")
    p.add_argument("job", metavar="JOB")
    p.add_argument("--scope", metavar="KIND:ID", help="one scope (default: global, or all)")
    p.add_argument("--since", metavar="TIME", help="plans at or after TIME (default: 24 h ago)")
    p.add_argument("--until", metavar="TIME", help="plans up to TIME (default: now)")
    p.add_argument("--limit", type=int, default=50, help="the last LIMIT lines (default 50)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(command=_explain)


def _explain(args: argparse.Namespace) -> int:
    query = ExplainQuery.parse(given(args, field_names(ExplainQuery)), labels("job"))
    answer = send(args, query)
    if args.json:
        print(json.dumps(answer.to_json(), indent=2))
        return 0
    for line in render(answer):
        print(line)
    return 0


def render(answer: Explanation) -> list[str]:
    """The answer as text: a heading, then one line per plan (or folded plans)."""
    which = "all scopes" if answer.scope is None else str(answer.scope)
    out = [
        f"job {answer.job} ({which}), {answer.schedule or 'no recorded schedule'}:"
        f" plans {utc_text(answer.since)} .. {utc_text(answer.until)} UTC"
    ]
    if answer.truncated:
        out.append("(older plans not shown: narrow the window with --since / --until)")
    out += [_line(line) for line in answer.lines]
    if not answer.lines:
        out.append("no plan in this window")
    if answer.next_plan is not None and answer.next_plan > answer.until:
        out.append(f"{utc_text(answer.next_plan)}  next plan, not due yet")
    return out


def _line(line: ExplainLine) -> str:
    when = utc_text(line.first_plan)
    if line.plans > 1 or line.last_plan != line.first_plan:
        when = f"{when} .. {utc_text(line.last_plan)}"
    if line.statuses or line.skipped:
        ran = ", ".join(f"{n} {s}" for s, n in sorted(line.statuses.items()))
        skipped = ", ".join(f"{n} {r}" for r, n in sorted(line.skipped.items()))
        parts = [p for p in (ran and f"ran: {ran}", skipped and f"skipped: {skipped}") if p]
        return f"{when}  {'; '.join(parts)}"
    if line.execution_id is not None:
        attempts = f"attempt {line.attempt}/{line.max_attempts}"
        what = "ran" if line.state == "ran" else line.state
        trigger = "" if line.trigger == "schedule" else f" ({line.trigger})"
        return (
            f"{when}  {what}{trigger}: {line.status}, {attempts}, runner {line.runner or '-'},"
            f" runs show {line.execution_id}"
        )
    count = f"{line.plans} plan{'s' if line.plans != 1 else ''}"
    if line.state == "skipped":
        return f"{when}  skipped ({line.reason}): {count}"
    return f"{when}  {_STATES.get(line.state, line.state)}: {count}"


_STATES = {
    "due": "due, waiting for a replica's claim",
    "not_due": "not due yet",
    "unrecorded": "no row and no record (pruned, or skipped before skips were recorded)",
}
