"""A run's details show what it returned (``Result.data``, the ``result`` column) and, for a
dynamic job, the schedule's payload it ran with: ``pgsched runs show`` (text and ``--json``)
and the dashboard's execution page, escaped."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

import pgsched
from pgsched._facades.http.web import WebRequest
from tests.acceptance.operator_cli.ops import Ops

pytestmark = pytest.mark.acceptance

DATA = {"note": "<b>done</b> & \x1b[31mred", "n": 3}
PAYLOAD = {"text": "<script>alert(1)</script>"}
USER = pgsched.Scope("user", "1")


def _remind(run: pgsched.Run) -> pgsched.Result:
    return pgsched.Result(rows_affected=1, data=DATA)


def _run_with_payload(ops: Ops) -> uuid.UUID:
    s = pgsched.Scheduler(dsn=ops.dsn, schema=ops.schema, runner_id="registrar")
    s.register(_remind, name="remind", dynamic=True)
    s.put_schedule("remind", USER, every="1h", payload=PAYLOAD)
    made = s.trigger("remind", USER)  # a run-now gets the schedule's payload
    assert made.id is not None and s.run_once().succeeded == 1
    return made.id


def test_runs_show_prints_the_result_and_the_payload(bare_ops: Ops) -> None:
    ident = _run_with_payload(bare_ops)
    text = bare_ops.ok("runs", "show", str(ident))
    lines = text.split("\n\n", 1)[0].splitlines()  # the execution, then its attempts
    fields = dict(line.split(":", 1) for line in lines)
    assert json.loads(fields["result"]) == DATA, lines
    assert json.loads(fields["payload"]) == PAYLOAD, lines
    assert "\x1b" not in text, "control characters are escaped"
    shown = json.loads(bare_ops.ok("runs", "show", str(ident), "--json"))
    assert (shown["result"], shown["payload"]) == (DATA, PAYLOAD), shown


def test_the_execution_page_shows_the_result_and_the_payload_escaped(bare_ops: Ops) -> None:
    ident = _run_with_payload(bare_ops)

    async def page() -> str:
        async with pgsched.AsyncAdmin(bare_ops.dsn, bare_ops.schema) as admin:
            app = pgsched.dashboard_asgi(admin)
            request = WebRequest("GET", "/run", {"id": str(ident)}, {}, {}, {}, "/")
            answer = await app.dashboard.handle(request)
            assert answer.status == 200, answer.body
            return str(answer.body)

    html = asyncio.run(page())
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert" not in html
    assert "&lt;b&gt;done&lt;/b&gt; &amp;" in html, html
