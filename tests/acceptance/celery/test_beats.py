"""Several ``celery beat -S pgsched`` processes and a real worker: each plan of an entry is
sent once, by the beat that claimed it, with the execution id as the task id."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg import sql

from tests.acceptance.celery.conftest import CeleryRig
from tests.support.rows import db_now
from tests.support.waiting import wait_until

Conn = psycopg.Connection[Any]
EVERY_2S = {"tick": {"every": 2}}


def _rows(db: Conn, schema: str, job: str) -> list[tuple[Any, ...]]:
    query = sql.SQL(
        "SELECT id, plan_time, status, attempt, runner_id, scope_kind, scope_id"
        " FROM {}.cron_executions WHERE job_name = %s ORDER BY plan_time, scope_id"
    ).format(sql.Identifier(schema))
    return db.execute(query, (job,)).fetchall()


def _plan(record: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(record["plan_time"])


def test_three_beats_one_killed_send_every_plan_once(db: Conn, any_rig: CeleryRig) -> None:
    rig = any_rig
    rig.migrate()
    rig.worker()
    # Two beats by the entry point's short name, one by the dotted path.
    beats = [rig.beat(f"beat{i}", EVERY_2S) for i in range(2)]
    beats.append(rig.beat("beat2", EVERY_2S, scheduler="pgsched.celery:BeatScheduler"))
    rig.wait_started(*beats)
    wait_until(lambda: len(rig.records()) >= 3, 40, "three plans sent")
    for beat in beats:
        assert "scheduler -> pgsched.celery.beat.BeatScheduler" in beat.output(), beat.name
    # Kill the beat that won the latest plan (its runner id is "<host>-<pid>").
    latest = _rows(db, rig.schema, "celery:tick")[-1]
    victim = next((b for b in beats if latest[4].endswith(f"-{b.pid}")), beats[0])
    victim.kill()
    killed_at = db_now(db)
    wait_until(
        lambda: sum(_plan(r) > killed_at for r in rig.records()) >= 5,
        40,
        lambda: f"five plans after the kill; sent: {rig.records()}",
    )
    # A plan the victim was sending when it died is sent again by a survivor once its lease
    # is stale (15 s), with the same task id.
    wait_until(
        lambda: all(
            r[2] == "SUCCESS" for r in _rows(db, rig.schema, "celery:tick") if r[1] <= killed_at
        ),
        40,
        lambda: f"every plan up to the kill sent: {_rows(db, rig.schema, 'celery:tick')}",
    )
    for beat in beats:
        if beat is not victim:
            assert beat.stop() == 0, beat.output()[-3000:]
    rows = [r for r in _rows(db, rig.schema, "celery:tick") if r[2] == "SUCCESS"]
    wait_until(
        lambda: {r["task_id"] for r in rig.records()} >= {str(r[0]) for r in rows},
        20,
        "the worker to run every task whose publish succeeded",
    )
    sent = rig.records()
    by_plan: dict[datetime, set[str]] = {}
    for record in sent:
        by_plan.setdefault(_plan(record), set()).add(record["task_id"])
    # One task id per plan, the execution id; a task sent twice is only ever the same plan's
    # message again after a steal (attempt > 1), which a consumer dedupes by id.
    assert all(len(ids) == 1 for ids in by_plan.values()), by_plan
    stolen = {str(r[0]) for r in _rows(db, rig.schema, "celery:tick") if r[3] > 1}
    counts = {tid: sum(r["task_id"] == tid for r in sent) for tid in {r["task_id"] for r in sent}}
    assert {tid for tid, n in counts.items() if n > 1} <= stolen, counts
    plans = sorted(by_plan)
    expected = [plans[0] + timedelta(seconds=2 * i) for i in range(len(plans))]
    assert plans == expected, f"plans lost between the first and the last: {plans}"
    assert {str(r[0]) for r in rows} == {next(iter(by_plan[r[1]])) for r in rows}


def test_task_id_is_the_execution_id_and_headers_carry_plan_and_scope(
    db: Conn, redis_rig: CeleryRig
) -> None:
    rig = redis_rig
    rig.worker()
    fan = {"fan": {"every": 2, "pgsched": {"scopes": ["tenant:1", "tenant:2"]}}}
    # This beat migrates the fresh schema itself (beat_pgsched_migrate), as the only one.
    beat = rig.beat("beat", fan)
    rig.wait_started(beat)
    wait_until(lambda: len(rig.records()) >= 4, 40, "two plans of two scopes sent")
    assert beat.stop() == 0, beat.output()[-3000:]
    rows = {str(r[0]): r for r in _rows(db, rig.schema, "celery:fan")}
    for record in rig.records():
        row = rows[record["task_id"]]
        assert record["execution_id"] == record["task_id"]
        assert _plan(record) == row[1]
        assert record["plan_time"].endswith("+00:00")
        assert record["scope"] == f"{row[5]}:{row[6]}"
        assert row[2] == "SUCCESS"
    assert {r["scope"] for r in rig.records()} == {"tenant:1", "tenant:2"}


def test_an_entry_removed_from_beat_schedule_stops(db: Conn, redis_rig: CeleryRig) -> None:
    rig = redis_rig
    rig.migrate()
    rig.worker()
    both = {"kept": {"every": 2}, "dropped": {"every": 2}}
    beats = [rig.beat(f"first{i}", both) for i in range(2)]
    rig.wait_started(*beats)
    wait_until(lambda: {r["entry"] for r in rig.records()} == {"kept", "dropped"}, 40, "both sent")
    for beat in beats:
        assert beat.stop() == 0, beat.output()[-3000:]
    restarted = db_now(db)
    beats = [rig.beat(f"second{i}", {"kept": {"every": 2}}) for i in range(2)]
    rig.wait_started(*beats)
    wait_until(
        lambda: sum(r["entry"] == "kept" and _plan(r) > restarted for r in rig.records()) >= 3,
        40,
        "three plans of the kept entry after the restart",
    )
    for beat in beats:
        assert beat.stop() == 0, beat.output()[-3000:]
    late = [r for r in rig.records() if r["entry"] == "dropped" and _plan(r) > restarted]
    assert late == []
    assert all(r[1] <= restarted for r in _rows(db, rig.schema, "celery:dropped"))
