"""The request types of the operations core: one parser from field -> text for each action
the command line, the HTTP API and the dashboard take."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

import pgsched
from pgsched import Scope
from pgsched._operations.audit import Action
from pgsched._operations.requests import (
    ExplainQuery,
    RunsQuery,
    ScheduleRequest,
    TriggerRequest,
    field_names,
)
from pgsched._structures import SCHEDULE_FIELDS, ScheduleSpec


def option(name: str) -> str:
    return "--" + name.replace("_", "-")


def test_a_trigger_is_read_from_text() -> None:
    given = {"job": "report", "scope": "tenant:a:b", "at": "2027-03-28T09:00:00+02:00"}
    request = TriggerRequest.parse({**given, "all_scopes": ""})
    assert request == TriggerRequest(
        "report", Scope("tenant", "a:b"), datetime(2027, 3, 28, 7, tzinfo=UTC), False
    )
    assert TriggerRequest.parse({"job": "report", "all_scopes": "1"}).all_scopes is True
    assert TriggerRequest.parse({"job": "report", "all_scopes": True}).all_scopes is True


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"scope": "tenant"}, "job 'report': --scope 'tenant' is not of the form KIND:ID"),
        ({"at": "soon"}, "job 'report': --at='soon' is not an ISO 8601 time"),
        ({"all_scopes": "maybe"}, "job 'report': --all-scopes='maybe' must be true or false"),
        ({"all_scopes": 1}, "job 'report': --all-scopes=1 must be true or false"),
        ({"when": "now"}, "job 'report': unknown field 'when'"),
    ],
)
def test_a_bad_trigger_field_is_one_line_naming_it(given: dict[str, object], message: str) -> None:
    with pytest.raises(pgsched.ConfigError) as info:
        TriggerRequest.parse({"job": "report", **given}, option)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_a_field_taken_from_the_path_may_not_be_repeated() -> None:
    with pytest.raises(pgsched.ConfigError, match=r"^job 'report': unknown field 'job'$"):
        TriggerRequest.parse({"job": "other"}, fixed={"job": "report"})
    with pytest.raises(pgsched.ConfigError, match="the request names no job"):
        TriggerRequest.parse({})


def test_runs_keep_their_defaults_for_fields_absent_or_empty() -> None:
    assert RunsQuery.parse({"job": "", "limit": None}) == RunsQuery()
    query = RunsQuery.parse({"status": "failed", "limit": "5", "since": "2027-01-01"})
    assert (query.status, query.limit, query.since) == (
        "failed",
        5,
        datetime(2027, 1, 1, tzinfo=UTC),
    )
    with pytest.raises(pgsched.ConfigError, match=r"^limit='many' must be an integer$"):
        RunsQuery.parse({"limit": "many"})
    with pytest.raises(pgsched.ConfigError, match=r"^unknown field 'state'$"):
        RunsQuery.parse({"state": "FAILED"})


def test_explain_names_an_unknown_parameter() -> None:
    assert ExplainQuery.parse({"limit": "7"}, fixed={"job": "report"}).limit == 7
    with pytest.raises(pgsched.ConfigError, match=r"^job 'report': unknown parameter 'from'$"):
        ExplainQuery.parse({"from": "x"}, fixed={"job": "report"})


def test_a_schedule_is_read_from_text_or_from_json_values() -> None:
    text = ScheduleRequest.parse(
        {
            "job": "reminder",
            "scope": "user:9",
            "every": "15m",
            "payload": '{"a": 1}',
            "starts_at": "2027-01-01T00:00:00",
            "ends_at": "2028-01-01T00:00:00Z",
            "paused": "1",
            "timezone": "",
        }
    )
    assert text == ScheduleRequest(
        "reminder",
        ScheduleSpec(
            Scope("user", "9"),
            every="15m",
            payload={"a": 1},
            starts_at=datetime(2027, 1, 1, tzinfo=UTC),
            ends_at=datetime(2028, 1, 1, tzinfo=UTC),
            paused=True,
        ),
    )
    body = {"every": 900, "payload": {"a": 1}, "paused": False}
    json = ScheduleRequest.parse(body, fixed={"job": "reminder", "scope": "user:9"})
    assert (json.spec.every, json.spec.payload, json.spec.paused) == (900, {"a": 1}, False)


@pytest.mark.parametrize(
    ("given", "message"),
    [
        (
            {"tz": "UTC"},
            "job 'reminder', scope user:9: unknown field 'tz' (did you mean 'timezone'?)",
        ),
        ({"payload": "{"}, "job 'reminder', scope user:9: --payload='{' is not JSON"),
        ({"payload": "[1]"}, "job 'reminder', scope user:9: --payload must be a JSON object"),
        ({"ends_at": "never"}, "job 'reminder', scope user:9: --ends-at='never' is not an ISO"),
    ],
)
def test_a_bad_schedule_field_is_one_line_naming_it(given: dict[str, str], message: str) -> None:
    with pytest.raises(pgsched.ConfigError) as info:
        ScheduleRequest.parse({"job": "reminder", "scope": "user:9", **given}, option)
    assert str(info.value).startswith(message)


def test_a_schedule_request_reads_every_field_of_a_spec() -> None:
    assert field_names(ScheduleRequest) == ("job", "scope", *SCHEDULE_FIELDS)
    assert field_names(TriggerRequest) == ("job", "scope", "at", "all_scopes")


def test_the_actions_are_the_names_the_action_log_records() -> None:
    assert Action("schedule_put") is Action.SCHEDULE_PUT
    assert str(Action.TRIGGER) == "trigger"
    assert len({a.value for a in Action}) == len(Action)
