"""Triggers through the HTTP API of a real replica (issue 22's findings): a future trigger
never swallows a run-now, an ended plan is not queued again, a scoped job needs a scope that
it has, unknown body fields are refused, and the job summary's last plan ignores manual rows
still ahead."""

from __future__ import annotations

from datetime import datetime

import pytest

from tests.acceptance.http.cluster import SCOPE_ID, TOKEN, Cluster

pytestmark = pytest.mark.acceptance

FAR = "2031-01-01T00:30:00+00:00"  # between two of pausable's hourly plans
PLAN = "2031-01-01T00:00:00+00:00"  # one of them
AT_FAR = datetime.fromisoformat(FAR)


def _manual_count(cluster: Cluster, job: str) -> int:
    return int(
        cluster.one(
            "SELECT count(*) FROM {s}.cron_executions WHERE trigger = 'manual' AND job_name = %s",
            (job,),
        )
    )


def test_future_trigger_never_swallows_a_run_now_and_an_ended_plan_is_refused(
    cluster: Cluster,
) -> None:
    later = cluster.main.post("/api/jobs/pausable/trigger", token=TOKEN, body={"at": FAR})
    assert later.status == 201, later.text
    assert later.json()["plan_time"] == FAR and later.json()["status"] == "PENDING"

    now = cluster.main.post("/api/jobs/pausable/trigger", token=TOKEN)
    assert now.status == 201, now.text
    assert now.json()["id"] != later.json()["id"], "the run-now is a run of its own"

    again = cluster.main.post("/api/jobs/pausable/trigger", token=TOKEN, body={"at": FAR})
    assert again.status == 200, again.text
    assert (again.json()["id"], again.json()["created"]) == (later.json()["id"], False)

    assert cluster.main.post(f"/api/runs/{later.json()['id']}/cancel", token=TOKEN).status == 200
    before = _manual_count(cluster, "pausable")
    ended = cluster.main.post("/api/jobs/pausable/trigger", token=TOKEN, body={"at": FAR})
    assert ended.status == 409, ended.text
    error = ended.json()["error"]
    assert "already ended" in error and "CANCELLED" in error and later.json()["id"] in error
    assert _manual_count(cluster, "pausable") == before, "nothing was queued"

    # The summary's last plan is what ran or was scheduled, never the cancelled 2031 trigger.
    jobs = {j["job"]: j for j in cluster.main.get("/api/jobs").json()["jobs"]}
    last = jobs["pausable"]
    assert last["last_status"] != "CANCELLED", last
    ahead = last["last_plan"] and datetime.fromisoformat(last["last_plan"]) >= AT_FAR
    assert not ahead, last


def test_a_scoped_job_needs_a_scope_it_has(cluster: Cluster) -> None:
    before = _manual_count(cluster, "tick")
    for body in ({}, {"scope": "tenant:nobody"}, {"scope": "global:global"}):
        resp = cluster.main.post("/api/jobs/tick/trigger", token=TOKEN, body=body)
        assert resp.status == 400, (body, resp.text)
        assert "'tick'" in resp.json()["error"], resp.text
    named = cluster.main.post("/api/jobs/tick/trigger", token=TOKEN, body={}).json()["error"]
    assert '"all_scopes": true' in named and "--" not in named, "the API names its own fields"
    resp = cluster.main.post(
        "/api/jobs/tick/trigger", token=TOKEN, body={"all_scopes": True, "scope": "tenant:x"}
    )
    assert resp.status == 400, resp.text
    assert _manual_count(cluster, "tick") == before, "a refused trigger queues nothing"

    every = cluster.main.post("/api/jobs/tick/trigger", token=TOKEN, body={"all_scopes": True})
    assert every.status in (200, 201), every.text
    runs = every.json()["runs"]
    assert [r["scope"] for r in runs] == [{"kind": "tenant", "id": SCOPE_ID}]


def test_unknown_trigger_fields_are_refused(cluster: Cluster) -> None:
    before = _manual_count(cluster, "hourly")
    resp = cluster.main.post("/api/jobs/hourly/trigger", token=TOKEN, body={"scop": "tenant:acme"})
    assert resp.status == 400, resp.text
    assert "'scop'" in resp.json()["error"] and "'hourly'" in resp.json()["error"]
    assert _manual_count(cluster, "hourly") == before


def test_a_trigger_at_a_scheduled_plan_adds_nothing_and_warnings_are_in_the_json(
    cluster: Cluster,
) -> None:
    before = _manual_count(cluster, "hourly")
    covered = cluster.main.post("/api/jobs/hourly/trigger", token=TOKEN, body={"at": PLAN})
    assert covered.status == 200, covered.text
    body = covered.json()
    assert (body["created"], body["scheduled_plan"], body["id"]) == (False, True, None), body
    assert body["plan_time"] == PLAN and body["warnings"] == [], body
    assert _manual_count(cluster, "hourly") == before, "the scheduled run covers it"

    past = cluster.main.post(
        "/api/jobs/hourly/trigger", token=TOKEN, body={"at": "2020-01-01T00:30:00+00:00"}
    )
    assert past.status == 201, past.text
    assert any("in the past" in w for w in past.json()["warnings"]), past.text
