"""The command line given a scheduler already built (``manage.py pgsched``): no APP, and the
scheduler's database and schema unless the options say otherwise."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog

from pgsched import Run, Scheduler
from pgsched._cli.main import _parser, main

DSN = "host=db.internal dbname=shop password=pw-given-1"


@pytest.fixture(autouse=True)
def _logging_put_back() -> Iterator[None]:
    """main() sets up logging for the process, as the command line does: put back after."""
    saved, root = structlog.get_config(), logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.configure(**saved)
    root.handlers, root.level = handlers, level


def shop() -> Scheduler:
    scheduler = Scheduler(dsn=DSN, schema="shop_jobs")

    @scheduler.job(every="5m")
    def restock(run: Run) -> None:
        pass

    return scheduler


def test_the_commands_take_no_app_and_default_to_its_database() -> None:
    scheduler = shop()
    parser = _parser(scheduler, "manage.py pgsched")
    for command in (["run"], ["check"], ["backfill", "restock", "--from", "x", "--to", "y"]):
        args = parser.parse_args(command)
        assert (args.app, args.scheduler) == (None, scheduler)
        assert (args.dsn, args.schema) == (DSN, "shop_jobs")
    args = parser.parse_args(["--dsn", "dbname=other", "status", "--schema", "elsewhere"])
    assert (args.dsn, args.schema) == ("dbname=other", "elsewhere")


def test_without_a_scheduler_app_is_required() -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["check"])
    assert _parser().parse_args(["check", "app.py"]).scheduler is None


def test_check_lists_the_given_scheduler_s_jobs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--count", "1"], scheduler=shop(), prog="manage.py pgsched") == 0
    out = capsys.readouterr().out
    assert "restock" in out
    assert "1 job(s) OK" in out


def test_no_jobs_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check"], scheduler=Scheduler(dsn=DSN)) == 1
    assert capsys.readouterr().err == "pgsched: error: the scheduler registers no jobs\n"


def test_its_usage_is_under_the_given_name(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["runs", "--help"], scheduler=shop(), prog="manage.py pgsched")
    assert capsys.readouterr().out.startswith("usage: manage.py pgsched runs")


def test_check_lists_a_calendar_job_s_plans_after_its_calendar(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from datetime import UTC, datetime, timedelta

    from pgsched import Calendar

    scheduler = Scheduler(dsn=DSN)
    today = datetime.now(UTC).date()
    # Every day is a working day but the next three: the first plan listed is the fourth day.
    closed = [today + timedelta(days=i) for i in (1, 2, 3)]
    scheduler.register(
        lambda run: None, name="daily", every="1d", calendar=Calendar("mon-sun", exclude=closed)
    )
    assert main(["check", "--count", "2"], scheduler=scheduler) == 0
    out = capsys.readouterr().out
    listed = [(today + timedelta(days=i)).isoformat() for i in (4, 5)]
    assert f"{listed[0]} 00:00:00, {listed[1]} 00:00:00" in out
    assert "skip" in out  # the schedule column names the calendar and what it does
