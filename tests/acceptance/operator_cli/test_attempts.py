"""The history of every attempt through ``pgsched runs show`` against real replicas: a run that
failed twice before it succeeded, and a lease taken over after its replica was killed -9."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.acceptance.operator_cli.ops import Ops, assert_one_line_error, parse_table
from tests.support.replica import Replica
from tests.support.rows import row_by_id, rows
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance

FLAKY_APP = textwrap.dedent(
    """
    import pgsched

    scheduler = pgsched.Scheduler(tick_interval="1s")

    @scheduler.job(every="1h", max_attempts=3, retry_backoff=[])
    def flaky(run):
        if run.attempt < 3:
            raise ValueError(f"attempt {run.attempt} failed")
        return 1
    """
)

# The first attempt never ends on its own (its replica is killed -9 while it runs); the
# second, on the replica that takes the lease over once it is stale, succeeds.
STUCK_APP = textwrap.dedent(
    """
    import time
    import pgsched

    scheduler = pgsched.Scheduler(tick_interval="1s")

    @scheduler.job(every="1h", max_attempts=2, run_timeout="10s", stale_timeout="12s",
                   heartbeat_interval="1s", allow_stale_reentry=True)
    def stuck(run):
        if run.attempt == 1:
            time.sleep(600)
        return 1
    """
)


@pytest.fixture
def start(bare_ops: Ops) -> Iterator[Callable[[str, str], Replica]]:
    started: list[Replica] = []

    def run(app_text: str, runner_id: str) -> Replica:
        (bare_ops.workdir / f"{runner_id}.py").write_text(app_text)
        replica = Replica.run(
            f"{runner_id}.py", runner_id, cwd=bare_ops.workdir, env=bare_ops.env()
        )
        started.append(replica)
        return replica

    yield run
    for replica in started:
        replica.kill()


def _first_row(ops: Ops, job: str, replica: Replica) -> dict[str, Any]:
    def found() -> dict[str, Any] | None:
        replica.check_alive()
        held = rows(ops.db, ops.schema, job)
        return held[0] if held else None

    return wait_until(found, 60, f"{job} was never claimed")


def test_runs_show_lists_two_failed_attempts_with_tracebacks_then_the_success(
    bare_ops: Ops, start: Callable[[str, str], Replica]
) -> None:
    ops = bare_ops
    replica = start(FLAKY_APP, "flaky-runner")
    ident = _first_row(ops, "flaky", replica)["id"]

    def succeeded() -> bool:
        replica.check_alive()
        return bool(row_by_id(ops.db, ops.schema, ident)["status"] == "SUCCESS")

    wait_until(succeeded, 60, "flaky never succeeded on its third attempt")

    shown = json.loads(ops.ok("runs", "show", str(ident), "--json"))
    assert (shown["id"], shown["status"], shown["attempt"]) == (str(ident), "SUCCESS", 3)
    attempts = shown["attempts"]
    assert [(a["attempt"], a["status"]) for a in attempts] == [
        (1, "FAILED"),
        (2, "FAILED"),
        (3, "SUCCESS"),
    ]
    assert {a["runner_id"] for a in attempts} == {"flaky-runner"}
    for a in attempts[:2]:
        assert a["error_code"] == "handler_error"
        assert a["error_msg"] == f"ValueError: attempt {a['attempt']} failed"
        assert "in flaky" in a["traceback"]
        assert a["traceback"].rstrip().endswith(f"ValueError: attempt {a['attempt']} failed")

    text = ops.ok("runs", "show", str(ident))
    assert "status:      SUCCESS" in text
    table = parse_table(text.split("\n\n")[1])
    assert [(r["ATTEMPT"], r["STATUS"], r["RUNNER"]) for r in table] == [
        ("1", "FAILED", "flaky-runner"),
        ("2", "FAILED", "flaky-runner"),
        ("3", "SUCCESS", "flaky-runner"),
    ]
    assert table[0]["ERROR"] == "handler_error: ValueError: attempt 1 failed"
    assert "attempt 1 traceback:" in text and "attempt 2 traceback:" in text
    assert text.count("Traceback (most recent call last):") == 2

    listed = json.loads(ops.ok("runs", "--job", "flaky", "--scope", "global:global", "--json"))
    assert str(ident) in [r["id"] for r in listed["runs"]]


def test_runs_show_keeps_the_attempt_of_a_replica_killed_mid_run(
    bare_ops: Ops, start: Callable[[str, str], Replica]
) -> None:
    ops = bare_ops
    doomed = start(STUCK_APP, "doomed")
    row = _first_row(ops, "stuck", doomed)
    assert row["runner_id"] == "doomed"
    doomed.kill()  # SIGKILL: no shutdown write, the lease just stops being renewed
    thief = start(STUCK_APP, "thief")

    def taken_over() -> bool:
        thief.check_alive()
        return bool(row_by_id(ops.db, ops.schema, row["id"])["status"] == "SUCCESS")

    wait_until(taken_over, 90, "the killed replica's lease was never taken over")

    shown = json.loads(ops.ok("runs", "show", str(row["id"]), "--json"))
    attempts = shown["attempts"]
    assert [(a["attempt"], a["runner_id"], a["status"]) for a in attempts] == [
        (1, "doomed", "FAILED"),
        (2, "thief", "SUCCESS"),
    ]
    assert attempts[0]["error_code"] == "stale_timeout"
    assert "doomed" in attempts[0]["error_msg"]
    assert attempts[0]["fencing_token"] == row["fencing_token"] < attempts[1]["fencing_token"]


def test_runs_bad_values_give_one_line_naming_the_flag(bare_ops: Ops) -> None:
    assert_one_line_error(bare_ops("runs", "--scope", "nocolon"), "--scope 'nocolon'")
    assert_one_line_error(bare_ops("runs", "--since", "yesterday"), "--since='yesterday'")
    assert_one_line_error(bare_ops("runs", "--until", "2027-13-01"), "--until='2027-13-01'")
    assert_one_line_error(bare_ops("runs", "show", "nope"), "'nope' is not a UUID")
    missing = "00000000-0000-0000-0000-000000000000"
    assert_one_line_error(bare_ops("runs", "show", missing), "does not exist")
