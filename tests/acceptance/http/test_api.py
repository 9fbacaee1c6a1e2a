"""The JSON API of a real replica: its fields, filters and limits, and the write API behind
its bearer token."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import pytest

from tests.acceptance.http.cluster import (
    MAIN_JOBS,
    SCOPE_ID,
    TOKEN,
    Cluster,
    seed_job,
    seed_run,
)
from tests.support.net import http
from tests.support.waiting import wait_until

pytestmark = pytest.mark.acceptance


# -- 5. the JSON API -----------------------------------------------------------------------

JOB_FIELDS = {
    "job",
    "paused",
    "schedule",
    "last_plan",
    "last_status",
    "last_success",
    "running",
    "stale",
    "failed",
    "pending",
}
RUN_FIELDS = {
    "id",
    "job",
    "scope",
    "plan_time",
    "trigger",
    "status",
    "attempt",
    "max_attempts",
    "next_retry_at",
    "runner_id",
    "fencing_token",
    "heartbeat_at",
    "stale_after",
    "started_at",
    "finished_at",
    "duration_ms",
    "rows_affected",
    "result",
    "error_code",
    "error_msg",
    "created_at",
    "stale",
}


def test_api_jobs(cluster: Cluster) -> None:
    # What the checks below read, whenever this test runs (first, in a shuffled order, or
    # before the replicas' first plans fell due): a success of tick and a failure of boom.
    wait_until(
        lambda: cluster.one(
            "SELECT count(*) FILTER (WHERE job_name = 'tick' AND status = 'SUCCESS') >= 1"
            " AND count(*) FILTER (WHERE job_name = 'boom' AND status = 'FAILED') >= 1"
            " FROM {s}.cron_executions"
        ),
        20,
        "a success of tick and a failure of boom",
    )
    seed_job(cluster, "ghost_api")
    seed_run(cluster, "ghost_api", "RUNNING", stale_in_s=-5)
    resp = cluster.main.get("/api/jobs")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    jobs = {j["job"]: j for j in resp.json()["jobs"]}
    assert {*MAIN_JOBS, "quiet", "ghost_api"} <= set(jobs)
    for job in jobs.values():
        assert set(job) >= JOB_FIELDS, set(job) ^ JOB_FIELDS
    tick = jobs["tick"]
    assert tick["paused"] is False
    assert tick["schedule"]
    assert tick["last_status"] in ("RUNNING", "SUCCESS")
    assert datetime.fromisoformat(tick["last_success"]).tzinfo is not None
    assert tick["stale"] == 0 and tick["failed"] == 0
    assert jobs["boom"]["failed"] >= 1 and jobs["boom"]["last_success"] is None
    assert (jobs["ghost_api"]["stale"], jobs["ghost_api"]["running"]) == (1, 0)


def test_api_runs_fields_filters_and_limit(cluster: Cluster) -> None:
    # The rows the filters below pick from, whenever this test runs (first, in a shuffled
    # order): three of tick, five successes, a failure of boom.
    wait_until(
        lambda: cluster.one(
            "SELECT count(*) FILTER (WHERE job_name = 'tick') >= 3"
            " AND count(*) FILTER (WHERE status = 'SUCCESS') >= 5"
            " AND count(*) FILTER (WHERE job_name = 'boom' AND status = 'FAILED') >= 1"
            " FROM {s}.cron_executions"
        ),
        20,
        "three runs of tick, five successes and a failure of boom",
    )
    resp = cluster.main.get("/api/runs")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    runs = resp.json()["runs"]
    assert 1 <= len(runs) <= 50
    for run in runs:
        assert set(run) >= RUN_FIELDS, set(run) ^ RUN_FIELDS
        uuid.UUID(run["id"])
    plans = [datetime.fromisoformat(r["plan_time"]) for r in runs]
    assert plans == sorted(plans, reverse=True)  # newest plan first

    tick = cluster.main.get("/api/runs?job=tick&limit=3").json()["runs"]
    assert len(tick) == 3 and {r["job"] for r in tick} == {"tick"}
    row = cluster.q(
        "SELECT job_name, scope_kind, scope_id, plan_time, trigger FROM {s}.cron_executions"
        " WHERE id = %s",
        (tick[0]["id"],),
    )[0]
    # The API's row is the database's (its newest run of tick may be a manual one: the
    # package's trigger tests share this cluster and may run first in a shuffled order).
    assert row[:3] == ("tick", "tenant", SCOPE_ID) and row[4] == tick[0]["trigger"]
    assert datetime.fromisoformat(tick[0]["plan_time"]) == row[3]

    failed = cluster.main.get("/api/runs?job=boom&status=FAILED&limit=1000").json()["runs"]
    in_db = cluster.one(
        "SELECT count(*) FROM {s}.cron_executions WHERE job_name = 'boom' AND status = 'FAILED'"
    )
    assert 1 <= len(failed) <= in_db
    assert {(r["job"], r["status"], r["error_code"]) for r in failed} == {
        ("boom", "FAILED", "handler_error")
    }
    lower = cluster.main.get("/api/runs?status=success&limit=5").json()["runs"]
    assert len(lower) == 5 and {r["status"] for r in lower} == {"SUCCESS"}
    assert len(cluster.main.get("/api/runs?limit=1").json()["runs"]) == 1
    unknown = cluster.main.get("/api/runs?job=no-such-job")  # no record names it: not found
    assert unknown.status == 404 and "no-such-job" in unknown.json()["error"], unknown.text

    # An empty limit is the default (50), as an empty field of any request is.
    empty = cluster.main.get("/api/runs?limit=")
    assert empty.status == 200 and 1 <= len(empty.json()["runs"]) <= 50, empty.text
    for bad in ("0", "-1", "1001", "abc", "2.5"):
        resp = cluster.main.get(f"/api/runs?limit={bad}")
        assert resp.status == 400, (bad, resp.status, resp.text)
        assert "limit" in resp.json()["error"]
    resp = cluster.main.get("/api/runs?status=bogus")
    assert resp.status == 400 and "status" in resp.json()["error"]


# -- 6. the write API and its token ---------------------------------------------------------

WRITES = (
    "/api/jobs/hourly/trigger",
    "/api/jobs/pausable/pause",
    "/api/jobs/pausable/resume",
    f"/api/runs/{uuid.uuid4()}/cancel",
)


def _pending(cluster: Cluster) -> int:
    return int(cluster.one("SELECT count(*) FROM {s}.cron_executions WHERE status = 'PENDING'"))


def test_writes_are_refused_when_no_token_is_configured(cluster: Cluster) -> None:
    pending = _pending(cluster)
    cluster.q("UPDATE {s}.job_state SET paused = false WHERE job_name = 'pausable'")
    for replica in (cluster.quiet, cluster.nomig):  # unset, and set to ""
        for path in WRITES:
            for token in (None, TOKEN, ""):
                resp = replica.post(path, token=token, body={})
                assert resp.status == 403, (replica.name, path, token, resp.status, resp.text)
                assert "PGSCHED_HTTP_TOKEN" in resp.json()["error"]
    assert _pending(cluster) == pending
    assert cluster.q("SELECT paused FROM {s}.job_state WHERE job_name = 'pausable'") == [(False,)]
    # Reading stays open.
    assert cluster.quiet.get("/api/jobs").status == 200


def test_writes_need_the_right_bearer_token(cluster: Cluster) -> None:
    pending = _pending(cluster)
    cluster.q("UPDATE {s}.job_state SET paused = false WHERE job_name = 'pausable'")
    for path in WRITES:
        attempts: list[dict[str, str]] = [
            {},
            {"Authorization": f"Bearer {TOKEN}x"},
            {"Authorization": f"Bearer {TOKEN[:-1]}"},
            {"Authorization": "Bearer "},
            {"Authorization": TOKEN},
            {"Authorization": f"Basic {TOKEN}"},
        ]
        for headers in attempts:
            resp = cluster.main.post(path, headers=headers, body={})
            assert resp.status == 401, (path, headers, resp.status, resp.text)
            assert resp.headers.get("WWW-Authenticate", "").startswith("Bearer")
    assert _pending(cluster) == pending
    assert cluster.q("SELECT paused FROM {s}.job_state WHERE job_name = 'pausable'") == [(False,)]


def test_trigger_runs_the_job_on_a_replica_that_has_it(cluster: Cluster) -> None:
    resp = cluster.main.post("/api/jobs/hourly/trigger", token=TOKEN)  # no body at all
    assert resp.status == 201, resp.text
    ident = resp.json()["id"]
    row = wait_until(
        lambda: cluster.q(
            "SELECT trigger, status, runner_id, scope_kind, scope_id FROM {s}.cron_executions"
            " WHERE id = %s AND status = 'SUCCESS'",
            (ident,),
        ),
        10,
        "the triggered run to succeed",
    )
    assert row == [("manual", "SUCCESS", cluster.runner, "global", "global")]

    resp = cluster.main.post(
        "/api/jobs/tick/trigger", token=TOKEN, body={"scope": f"tenant:{SCOPE_ID}"}
    )
    assert resp.status == 201, resp.text
    scoped = resp.json()["id"]
    assert scoped != ident
    assert resp.json()["scope"] == {"kind": "tenant", "id": SCOPE_ID}
    assert cluster.q(
        "SELECT scope_kind, scope_id, trigger FROM {s}.cron_executions WHERE id = %s", (scoped,)
    ) == [("tenant", SCOPE_ID, "manual")]

    # A job this replica does not run, but another one does (it is in job_state).
    resp = cluster.main.post("/api/jobs/quiet/trigger", token=TOKEN, body={})
    assert resp.status == 201, resp.text
    quiet = wait_until(
        lambda: cluster.q(
            "SELECT runner_id FROM {s}.cron_executions WHERE id = %s AND status = 'SUCCESS'",
            (resp.json()["id"],),
        ),
        10,
        "the quiet replica to run its triggered job",
    )
    assert quiet == [("http-quiet",)]


def test_delayed_trigger_is_deduplicated_and_cancellable(cluster: Cluster) -> None:
    at = cluster.one("SELECT date_trunc('second', clock_timestamp()) + interval '1 hour'")
    resp = cluster.main.post("/api/jobs/hourly/trigger", token=TOKEN, body={"at": at.isoformat()})
    assert resp.status == 201, resp.text
    body = resp.json()
    ident = body["id"]
    assert body["created"] is True
    assert cluster.q(
        "SELECT status, trigger, plan_time FROM {s}.cron_executions WHERE id = %s", (ident,)
    ) == [("PENDING", "manual", at)]

    # While it is PENDING, a second trigger for the same instant returns it.
    resp = cluster.main.post("/api/jobs/hourly/trigger", token=TOKEN, body={"at": at.isoformat()})
    assert resp.status == 200, resp.text
    assert (resp.json()["id"], resp.json()["created"], resp.json()["status"]) == (
        ident,
        False,
        "PENDING",
    )

    resp = cluster.main.post(f"/api/runs/{ident}/cancel", token=TOKEN)
    assert resp.status == 200, resp.text
    assert resp.json()["status"] == "CANCELLED"
    assert cluster.q("SELECT status FROM {s}.cron_executions WHERE id = %s", (ident,)) == [
        ("CANCELLED",)
    ]
    # Not PENDING any more: a conflict. Neither are RUNNING/SUCCESS/FAILED rows.
    resp = cluster.main.post(f"/api/runs/{ident}/cancel", token=TOKEN)
    assert resp.status == 409, resp.text
    done = cluster.one(
        "SELECT id FROM {s}.cron_executions WHERE job_name = 'tick' AND status = 'SUCCESS' LIMIT 1"
    )
    resp = cluster.main.post(f"/api/runs/{done}/cancel", token=TOKEN)
    assert resp.status == 409, resp.text
    assert cluster.q("SELECT status FROM {s}.cron_executions WHERE id = %s", (done,)) == [
        ("SUCCESS",)
    ]


def test_pause_and_resume_flip_job_state(cluster: Cluster) -> None:
    def paused() -> bool:
        return bool(cluster.one("SELECT paused FROM {s}.job_state WHERE job_name = 'pausable'"))

    assert paused() is False
    resp = cluster.main.post("/api/jobs/pausable/pause", token=TOKEN)
    assert resp.status == 200, resp.text
    assert resp.json() == {"job": "pausable", "paused": True}
    assert paused() is True
    jobs = {j["job"]: j for j in cluster.main.get("/api/jobs").json()["jobs"]}
    assert jobs["pausable"]["paused"] is True and jobs["hourly"]["paused"] is False
    resp = cluster.main.post("/api/jobs/pausable/pause", token=TOKEN)  # idempotent
    assert resp.status == 200 and paused() is True

    resp = cluster.main.post("/api/jobs/pausable/resume", token=TOKEN)
    assert resp.status == 200, resp.text
    assert resp.json() == {"job": "pausable", "paused": False}
    assert paused() is False


def test_write_api_errors(cluster: Cluster) -> None:
    def manual() -> int:
        return int(cluster.one("SELECT count(*) FROM {s}.cron_executions WHERE trigger = 'manual'"))

    before = manual()
    cases: list[tuple[str, Any, int]] = [
        ("/api/jobs/no-such-job/trigger", {}, 404),
        ("/api/jobs/no-such-job/pause", None, 404),
        ("/api/jobs/no-such-job/resume", None, 404),
        (f"/api/runs/{uuid.uuid4()}/cancel", None, 404),
        ("/api/runs/not-a-uuid/cancel", None, 400),
        ("/api/jobs/hourly/trigger", {"scope": "no-colon"}, 400),
        ("/api/jobs/hourly/trigger", {"scope": ":id"}, 400),
        ("/api/jobs/hourly/trigger", {"scope": "kind:"}, 400),
        ("/api/jobs/hourly/trigger", {"at": "tomorrow at nine"}, 400),
        ("/api/jobs/hourly/trigger", b"{not json", 400),
        ("/api/jobs/hourly/trigger", [1, 2], 400),
    ]
    for path, body, status in cases:
        resp = cluster.main.post(path, token=TOKEN, body=body)
        assert resp.status == status, (path, body, resp.status, resp.text)
        assert resp.json()["error"], (path, body)
    assert manual() == before  # no bad request inserted anything
    assert not cluster.q("SELECT 1 FROM {s}.cron_executions WHERE job_name = 'no-such-job'")
    assert not cluster.q("SELECT 1 FROM {s}.job_state WHERE job_name = 'no-such-job'")


def test_every_error_under_api_is_json_with_its_status(cluster: Cluster) -> None:
    cases: list[tuple[str, str, Any, int]] = [
        ("GET", "/api/no-such-endpoint", None, 404),
        ("GET", "/api/jobs/hourly/nothing-here", None, 404),
        ("DELETE", "/api/jobs", None, 405),
        ("PUT", "/api/runs", None, 405),
        ("POST", "/api/jobs/hourly/trigger", b'{"scope": "' + b"x" * (2 << 20) + b'"}', 413),
    ]
    for method, path, body, status in cases:
        resp = http(method, cluster.main.url(path), token=TOKEN, body=body, timeout=30)
        assert resp.status == status, (method, path, resp.status, resp.text[:200])
        assert resp.headers["Content-Type"].startswith("application/json"), (method, path)
        assert resp.json()["error"], (method, path)
    assert "GET" in http("DELETE", cluster.main.url("/api/jobs")).headers["Allow"]


def test_unknown_query_parameters_are_refused_naming_them(cluster: Cluster) -> None:
    run_id = seed_run(cluster, "hourly", "SUCCESS")
    for path, name in [
        ("/api/runs?jobb=x", "jobb"),
        ("/api/runs?job=hourly&limt=5", "limt"),
        ("/api/jobs?verbose=1", "verbose"),
        ("/api/replicas?all=1", "all"),
        (f"/api/runs/{run_id}?full=1", "full"),
        ("/api/jobs/hourly/schedules?limit=5&q=x", "q"),
        ("/api/jobs/hourly/schedules/user:1?x=1", "x"),
    ]:
        resp = cluster.main.get(path)
        assert resp.status == 400, (path, resp.status, resp.text)
        assert f"unknown query parameter {name!r}" in resp.json()["error"], path
    assert cluster.main.get("/api/runs?job=hourly&limit=5").status == 200
