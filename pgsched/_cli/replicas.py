"""``pgsched replicas`` and ``pgsched forget``: the live replicas, and removing a job they no
longer run. Translation only; the operations core validates."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import admin_from, print_table, utc_text


def add_replica_commands(sub: Any) -> None:
    p = sub.add_parser("replicas", help="the live replicas: runner, host, version, jobs, HTTP")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(command=_replicas)

    p = sub.add_parser(
        "forget", help="remove JOB, which no live replica runs, from status (history stays)"
    )
    p.add_argument("job", metavar="JOB")
    p.set_defaults(command=_forget)


def _replicas(args: argparse.Namespace) -> int:
    replicas = admin_from(args).replicas()
    if args.json:
        print(json.dumps({"replicas": [r.to_json() for r in replicas]}, indent=2))
        return 0
    if not replicas:
        print("no live replicas")
        return 0
    headers = ["RUNNER", "HOST", "VERSION", "STARTED", "LAST SEEN", "HTTP", "JOBS"]
    rows = [
        [
            r.runner_id,
            r.host,
            r.version,
            utc_text(r.started_at),
            utc_text(r.seen_at),
            r.http_address or "-",
            ", ".join(r.jobs) or "-",
        ]
        for r in replicas
    ]
    print_table(headers, rows)
    return 0


def _forget(args: argparse.Namespace) -> int:
    admin_from(args).forget(args.job)
    print(f"forgot {args.job} (its history stays)")
    return 0
