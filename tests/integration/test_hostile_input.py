"""Hostile input (reliability item 5): every bad value gives a clear error naming the job, the
field and the value, and leaves the database as it was; odd but legal values are stored
verbatim; results the database cannot store fail the run ``invalid_result`` while the replica
goes on running its other jobs.

What happens to each input (the report of this file):

- cron ``* * * *``, ``60 * * * *``, ``*/0 * * * *``, ``@reboot``, 6/7 fields, ``0 0 31 2 *``
  (never fires), zone ``Mars/Olympus``: ConfigError at registration, nothing written.
  ``Etc/GMT+5`` is accepted and means UTC-5 (POSIX sign), as the README warns.
- durations 0, negative, NaN, inf, 1e12 s: ConfigError at registration.
- scopes: none -> the job runs nothing and logs no warning; 100,000 -> accepted, each runs
  exactly once; duplicates -> de-duplicated in order (static lists and callables);
  control characters (NUL, CR/LF, tab: Unicode category Cc) -> ConfigError from ``Scope()``
  (and in job names); U+2028/U+2029 and U+202E -> accepted and stored verbatim;
  10 KB -> ConfigError giving the size and the 1024-byte limit.
- results with NaN, NUL, 10,000-deep nesting, 100 MB -> the run is FAILED ``invalid_result``
  with the reason in ``error_msg``; other jobs keep running (``test_hostile_results.py``).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog
from psycopg import sql
from structlog.testing import capture_logs

import pgsched
from pgsched._facades.admin import Admin
from pgsched._telemetry.logs import configure_logging
from tests.integration.conftest import SchedulerFactory
from tests.support.plans import FixedPlans, past_plan
from tests.support.rows import count, inserted, job_index_reads, partition_of, rows, table
from tests.support.waiting import wait_until

pytestmark = pytest.mark.usefixtures("migrated")

ALARMING = ("warning", "error", "critical", "exception")
TABLES = ("cron_executions", "job_state", "schema_migrations")


def ok(run: pgsched.Run) -> int:
    return 1


def snapshot(db: Any, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of pgsched's tables, in a stable order."""
    return {
        name: db.execute(
            sql.SQL("SELECT * FROM {} ORDER BY 1, 2").format(table(schema, name))
        ).fetchall()
        for name in TABLES
    }


def counts(db: Any, schema: str) -> dict[str, int]:
    return {
        name: db.execute(sql.SQL("SELECT count(*) FROM {}").format(table(schema, name))).fetchone()[
            0
        ]
        for name in TABLES
    }


def alarming(events: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in events if e.get("log_level") in ALARMING]


@pytest.fixture
def baseline(make_scheduler: SchedulerFactory, migrated: str, db: Any) -> pgsched.Scheduler:
    """A replica that has run one good job once, so the tables hold something to keep. The
    job has that one plan: it never falls due again, wherever the clock is (an hourly job
    fell due again when a test crossed the hour)."""
    s = make_scheduler()
    s.register(ok, name="steady", planner=FixedPlans(past_plan(db)))
    assert s.run_once().succeeded == 1
    return s


# -- configuration errors -----------------------------------------------------------------------

# (options, field named, fragments of the message besides the job's name)
HOSTILE_OPTIONS: list[tuple[dict[str, Any], str, list[str]]] = [
    ({"cron": "* * * *"}, "cron", ["'* * * *'", "not a valid cron expression"]),
    ({"cron": "60 * * * *"}, "cron", ["'60 * * * *'", "out of range"]),
    ({"cron": "*/0 * * * *"}, "cron", ["'*/0 * * * *'", "step '0'"]),
    ({"cron": "0 0 31 2 *"}, "cron", ["'0 0 31 2 *'", "never fires"]),
    ({"cron": "@reboot"}, "cron", ["'@reboot'", "not a valid cron expression"]),
    ({"cron": "0 0 * * * *"}, "cron", ["6 fields", "5-field", "every="]),
    ({"cron": "*/10 * * * * *"}, "cron", ["6 fields", "5-field", "every="]),
    ({"cron": "0 0 12 * * * 2030"}, "cron", ["7 fields", "5-field"]),
    ({"cron": "0 0 0 * * * *"}, "cron", ["'0 0 0 * * * *'"]),
    ({"cron": "0 0 12 * * ? *"}, "cron", ["'0 0 12 * * ? *'"]),
    ({"cron": "R * * * *"}, "cron", ["random or hashed"]),
    ({"cron": "0 * * * *", "timezone": "Mars/Olympus"}, "timezone", ["'Mars/Olympus'", "IANA"]),
    ({"every": 0}, "every", ["every=0", "greater than zero"]),
    ({"every": "0s"}, "every", ["'0s'", "greater than zero"]),
    ({"every": -5}, "every", ["-5", "negative"]),
    ({"every": "-5m"}, "every", ["'-5m'", "negative"]),
    ({"every": float("nan")}, "every", ["nan"]),
    ({"every": float("inf")}, "every", ["inf"]),
    ({"every": -float("inf")}, "every", ["-inf"]),
    ({"every": 1e12}, "every", ["1000000000000.0"]),
    ({"every": 10**12}, "every", ["1000000000000"]),
    ({"every": "1000000000000s"}, "every", ["100 years"]),
    ({"every": "1m", "run_timeout": 0}, "run_timeout", ["greater than zero"]),
    ({"every": "1m", "run_timeout": -1}, "run_timeout", ["negative"]),
    ({"every": "1m", "run_timeout": float("nan")}, "run_timeout", ["nan"]),
    ({"every": "1m", "stale_timeout": 1e12}, "stale_timeout", ["1000000000000.0"]),
    ({"every": "1m", "schedule_delay": float("inf")}, "schedule_delay", ["inf"]),
    ({"every": "1m", "jitter": -1}, "jitter", ["negative"]),
    ({"every": "1m", "catch_up_window": 0}, "catch_up_window", ["greater than zero"]),
    ({"every": "1m", "retry_backoff": [float("nan")]}, "retry_backoff[0]", ["nan"]),
]


@pytest.mark.parametrize(
    ("options", "field", "fragments"),
    HOSTILE_OPTIONS,
    ids=[f"{f}={o.get(f, o.get('cron', o.get('every')))!r}" for o, f, _ in HOSTILE_OPTIONS],
)
def test_bad_option_is_refused_at_registration_and_writes_nothing(
    baseline: pgsched.Scheduler,
    migrated: str,
    db: Any,
    options: dict[str, Any],
    field: str,
    fragments: list[str],
) -> None:
    before = snapshot(db, migrated)
    with pytest.raises(pgsched.ConfigError) as info:
        baseline.register(ok, name="hostile_job", **options)
    message = str(info.value)
    assert "'hostile_job'" in message and f"{field}=" in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert len(message.splitlines()) == 1, message
    assert "hostile_job" not in baseline.jobs
    assert snapshot(db, migrated) == before
    # The replica goes on as before, and nothing of the refused job ever reaches the tables.
    sizes = counts(db, migrated)
    baseline.run_once()
    assert counts(db, migrated) == sizes
    assert count(db, migrated, "job_name = 'hostile_job'") == 0
    assert db.execute(
        sql.SQL("SELECT count(*) FROM {} WHERE job_name = 'hostile_job'").format(
            table(migrated, "job_state")
        )
    ).fetchone() == (0,)


@pytest.mark.parametrize(
    "expr",
    [
        pytest.param(
            expr,
        )
        for expr in ("0 0 0 * * * *", "0 0 12 * * ?", "0 0 12 * * ? *")
    ],
)
def test_every_six_or_seven_field_expression_is_told_to_use_five_fields(
    baseline: pgsched.Scheduler, expr: str
) -> None:
    with pytest.raises(pgsched.ConfigError, match="5-field"):
        baseline.register(ok, name="quartz", cron=expr)


@pytest.mark.parametrize("value", [1e12, 10**12])
def test_a_huge_number_of_seconds_is_called_too_long(
    baseline: pgsched.Scheduler, value: float
) -> None:
    with pytest.raises(pgsched.ConfigError, match="100 years"):
        baseline.register(ok, name="forever", every=value)


def test_bad_job_names_are_refused_and_write_nothing(
    baseline: pgsched.Scheduler, migrated: str, db: Any
) -> None:
    before = snapshot(db, migrated)
    for name, why in (
        ("", "non-empty"),
        ("a\x00b", "NUL"),
        ("report\r\nevil", "contains a control character"),
        ("x" * 10_240, "10240 bytes; the limit is 200 bytes"),
        ("\U0001f600" * 51, "204 bytes; the limit is 200 bytes"),  # 51 characters
    ):
        with pytest.raises(pgsched.ConfigError, match=why) as caught:
            baseline.register(ok, name=name, every="1h")
        assert len(str(caught.value)) < 300  # a long name is cut, not repeated whole
    assert list(baseline.jobs) == ["steady"]
    assert snapshot(db, migrated) == before


def test_etc_gmt_plus_5_means_utc_minus_5_as_the_readme_warns(
    make_scheduler: SchedulerFactory, migrated: str
) -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "`Etc/GMT+5` means UTC−5" in readme or "`Etc/GMT+5` means UTC-5" in readme
    s = make_scheduler()
    s.register(ok, name="posix_sign", cron="0 12 * * *", timezone="Etc/GMT+5")
    assert s.upcoming("posix_sign", datetime(2027, 6, 1, tzinfo=UTC), 1) == [
        datetime(2027, 6, 1, 17, tzinfo=UTC)  # 12:00 at UTC-5
    ]


# -- scopes -------------------------------------------------------------------------------------


def test_no_scopes_runs_nothing_and_logs_nothing_alarming(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    seen: list[pgsched.Run] = []

    async def empty_async(now: datetime) -> list[pgsched.Scope]:
        return []

    s = make_scheduler()
    s.register(seen.append, name="static_none", every="1s", scopes=[])
    s.register(seen.append, name="empty_tuple", every="1s", scopes=())
    s.register(seen.append, name="callable_none", every="1s", scopes=lambda now: [])
    s.register(seen.append, name="async_none", every="1s", scopes=empty_async)
    with capture_logs() as events:
        report = s.run_once()
        report_again = s.run_once()
    assert seen == []
    assert (report.started, report.errors, report.skipped) == (0, 0, 0)
    assert (report_again.started, report_again.errors) == (0, 0)
    assert rows(db, migrated) == []
    assert alarming(events) == [], alarming(events)


def _fan_out_seconds(s: pgsched.Scheduler, name: str, plan: datetime, n: int) -> float:
    """Seconds for one tick of a job fanned out over ``n`` scopes to claim and run them all."""
    seen: list[str] = []

    async def trivial(run: pgsched.Run) -> None:
        seen.append(run.scope.id)

    scopes = [pgsched.Scope("shard", str(i)) for i in range(n)]
    s.register(trivial, name=name, planner=FixedPlans(plan), scopes=scopes)
    started = time.monotonic()
    report = s.run_once()
    elapsed = time.monotonic() - started
    assert (report.claimed, report.succeeded, report.failed, report.errors) == (n, n, 0, 0)
    assert len(seen) == n and len(set(seen)) == n
    s.unregister(name)
    return elapsed


_WAITING = (
    "SELECT a.pid, a.state, a.wait_event_type, a.wait_event,"
    " round(extract(epoch FROM clock_timestamp() - a.query_start)::numeric, 1) AS running_s,"
    " left(regexp_replace(a.query, '\\s+', ' ', 'g'), 70) AS query,"
    " (SELECT array_agg(l.mode || ' ' || coalesce(l.relation::regclass::text, l.locktype))"
    "  FROM pg_locks l WHERE l.pid = a.pid AND NOT l.granted) AS waiting_for,"
    " pg_blocking_pids(a.pid) AS blocked_by"
    " FROM pg_stat_activity a"
    " WHERE a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.state <> 'idle'"
)


class _Watch:
    """What the database's sessions are doing, every few seconds once a step has run longer
    than it should: a statement that meets the statement timeout then says whether it was
    working or waiting, and for whom."""

    def __init__(self, db: Any, after_s: float, every_s: float = 3.0) -> None:
        self.seen: list[tuple[float, list[Any]]] = []
        self._db, self._after_s, self._every_s = db, after_s, every_s
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> _Watch:
        self._began = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(10)

    def _watch(self) -> None:
        if self._done.wait(self._after_s):
            return
        while not self._done.is_set():
            found = self._db.execute(_WAITING).fetchall()
            self.seen.append((round(time.monotonic() - self._began, 1), found))
            self._done.wait(self._every_s)


def test_a_hundred_thousand_scopes_each_run_exactly_once(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    # 100,000 by default (about 30 s on an idle 2-core machine); PGSCHED_TEST_FANOUT lowers it
    # for a quick local run. CI runs the default.
    plan = past_plan(db)
    n = int(os.environ.get("PGSCHED_TEST_FANOUT", "100000"))
    s = make_scheduler(max_concurrency=n)
    # The same tick at a tenth of the size, in the same run, on the same machine: the baseline
    # of the ratio below.
    tenth = _fan_out_seconds(s, "fan_out_tenth", plan, n // 10)
    # Autovacuum analyzes a table when it sees fit: here the day's partition and the cursors,
    # while they hold the tenth's rows only, and not again. Such figures know nothing of the
    # new job (on them, its claims and its second sight ran into the statement timeout).
    part = partition_of(db, migrated, "fan_out_tenth")
    for name in (part, "cron_cursors"):
        no_autovacuum = sql.SQL("ALTER TABLE {} SET (autovacuum_enabled = off)")
        db.execute(no_autovacuum.format(table(migrated, name)))
        db.execute(sql.SQL("ANALYZE {}").format(table(migrated, name)))
    # run_once ended its sessions: their counts are in once the tenth's inserts all are
    wait_until(lambda: inserted(db, migrated, part) >= n // 10, 30, "the tenth's counts")
    reads_before = job_index_reads(db, migrated, part)
    # Past 15 s (twice what the fan-out takes here under the full suite's load) the server's
    # sessions are looked at every 3 s, for the failure message.
    with capture_logs() as events, _Watch(db, after_s=15) as watch:
        try:
            elapsed = _fan_out_seconds(s, "fan_out", plan, n)
        except pgsched.PgschedError as exc:  # the tick failed: say why (its events are here)
            raise AssertionError(f"{exc}: {alarming(events)[:3]}; {watch.seen[-6:]}") from exc
    assert alarming(events) == [], alarming(events)[:3]
    # Each scope's check for a RUNNING row goes through the index of RUNNING rows by scope.
    # Planned through the index of (job, plan time) on those figures, it read every row of
    # the job claimed before it: a claim of 2,000 scopes took 5-7 s once 10,000 had been
    # claimed, and one met the statement timeout. (Counted before the queries below, which
    # read that index themselves.)
    wait_until(lambda: inserted(db, migrated, part) >= n // 10 + n, 30, "the fan-out's counts")
    reads = job_index_reads(db, migrated, part) - reads_before
    assert reads < n, f"{reads} entries of the job's plan index read to claim {n} scopes"
    stored = db.execute(
        sql.SQL(
            "SELECT count(*), count(DISTINCT scope_id), count(DISTINCT plan_time),"
            " count(*) FILTER (WHERE status = 'SUCCESS') FROM {} WHERE job_name = 'fan_out'"
        ).format(table(migrated))
    ).fetchone()
    assert stored == (n, n, 1, n)
    # Guard against a regression such as quadratic claiming (ten times the scopes would take
    # a hundred times as long; linear claiming takes about ten), not a performance claim:
    # those live in bench/. A ratio, so a loaded machine slows both sides alike.
    assert elapsed < 40 * tenth, f"{n} scopes took {elapsed:.1f}s, a tenth {tenth:.1f}s"
    # A second tick in the same plan period claims nothing again.
    s.register(
        lambda run: None,
        name="fan_out",
        planner=FixedPlans(plan),
        scopes=[pgsched.Scope("shard", str(i)) for i in range(n)],
    )
    assert s.run_once().started == 0
    assert count(db, migrated, "job_name = 'fan_out'") == n


def test_duplicate_scopes_are_deduplicated_in_order(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    a, b = pgsched.Scope("tenant", "a"), pgsched.Scope("tenant", "b")
    s = make_scheduler()
    spec = s.register(
        ok, name="static_dupes", every="1d", scopes=[b, a, b, pgsched.Scope("tenant", "a")]
    )
    assert spec.static_scopes == (b, a)
    s.register(ok, name="callable_dupes", every="1d", scopes=lambda now: [a, a, b, a, b])
    report = s.run_once()
    assert report.claimed == 4 and report.succeeded == 4
    for job in ("static_dupes", "callable_dupes"):
        assert sorted(r["scope_id"] for r in rows(db, migrated, job)) == ["a", "b"]
    # backfill with repeated scopes inserts each plan once
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=1)
    queued = s.backfill("static_dupes", end - timedelta(days=2), end, scopes=[a, a, a])
    assert queued == 3
    assert count(db, migrated, "trigger = 'backfill'") == 3


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda: pgsched.Scope("tenant", "a\x00b"), "NUL"),
        (lambda: pgsched.Scope("ten\x00ant", "a"), "NUL"),
        (lambda: pgsched.Scope("tenant", "line1\r\nline2"), "control character (carriage return)"),
        (lambda: pgsched.Scope("kind\n", "a"), "control character (newline)"),
        (lambda: pgsched.Scope("tenant", "x" * 10_240), "10240 bytes; the limit is 1024"),
        (lambda: pgsched.Scope("k" * 10_240, "a"), "10240 bytes; the limit is 1024"),
        (lambda: pgsched.Scope("tenant", "é" * 513), "1026 bytes; the limit is 1024"),
        (lambda: pgsched.Scope("tenant", "\ud800"), "not valid Unicode"),
        (lambda: pgsched.Scope("tenant", ""), "must not be empty"),
        (lambda: pgsched.Scope.parse("tenant:" + "x" * 10_240), "10240 bytes"),
    ],
    ids=[
        "nul-id",
        "nul-kind",
        "crlf-id",
        "lf-kind",
        "10kb-id",
        "10kb-kind",
        "1026-bytes",
        "surrogate",
        "empty",
        "parse",
    ],
)
def test_unstorable_scopes_are_refused_when_built(make: Callable[[], Any], fragment: str) -> None:
    with pytest.raises(pgsched.ConfigError) as info:
        make()
    message = str(info.value)
    assert fragment in message, message
    assert len(message) < 200, "the message echoes the whole 10 KB value"


def test_a_scopes_callable_that_builds_a_bad_scope_stops_only_its_job(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    s = make_scheduler()
    s.register(ok, name="steady", every="1d")
    s.register(ok, name="nul_scopes", every="1d", scopes=lambda now: [pgsched.Scope("t", "a\x00")])
    with capture_logs() as events:
        report = s.run_once()
    assert report.errors == 1 and report.succeeded == 1
    assert [r["status"] for r in rows(db, migrated, "steady")] == ["SUCCESS"]  # others ran
    assert rows(db, migrated, "nul_scopes") == []
    errors = [e for e in events if e["event"] == "scopes_error"]
    assert errors and errors[0]["job"] == "nul_scopes" and "NUL" in errors[0]["error"]


def test_scope_at_the_size_limit_is_stored(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    scopes = [pgsched.Scope("tenant", "x" * 1024), pgsched.Scope("k" * 1024, "😀" * 256)]
    s = make_scheduler()
    s.register(ok, name="at_limit", every="1d", scopes=scopes)
    assert s.run_once().succeeded == 2
    stored = {(r["scope_kind"], r["scope_id"]) for r in rows(db, migrated, "at_limit")}
    assert stored == {(sc.kind, sc.id) for sc in scopes}


def test_a_job_name_and_scope_at_their_limits_can_run(
    make_scheduler: SchedulerFactory, migrated: str, db: Any
) -> None:
    import random

    rnd = random.Random(7)  # incompressible: PostgreSQL cannot shrink the index entry

    def text(chars: int) -> str:
        return "".join(chr(rnd.randrange(0x10000, 0x10FFFF)) for _ in range(chars))

    # 50 and 2 x 256 four-byte characters: 200 bytes of job name, 1 KiB per scope part
    name, scope = text(50), pgsched.Scope(text(256), text(256))
    s = make_scheduler()
    s.register(ok, name=name, every="1d", scopes=[scope])  # accepted: within every limit
    assert s.run_once().succeeded == 1


ODD_SCOPES = [
    pgsched.Scope("tenant", "line1\u2028line2\u2029"),
    pgsched.Scope("tenant", "invoice\u202egpj.exe"),
    pgsched.Scope("kind\u2028\u202e", "\u2029"),
    pgsched.Scope("tenant", " leading and trailing "),
    pgsched.Scope("tenant", "\\u0000 is text"),
]
ODD_JOB = "report\u2028\u202eevil"


def test_line_separators_and_right_to_left_override_are_stored_verbatim(
    make_scheduler: SchedulerFactory, migrated: str, db: Any, runtime_dsn: str
) -> None:
    s = make_scheduler()
    seen: list[pgsched.Scope] = []
    s.register(lambda run: seen.append(run.scope), name=ODD_JOB, every="1d", scopes=ODD_SCOPES)
    assert s.run_once().succeeded == len(ODD_SCOPES)
    assert sorted(seen) == sorted(ODD_SCOPES)
    stored = rows(db, migrated, ODD_JOB)
    assert sorted(pgsched.Scope(r["scope_kind"], r["scope_id"]) for r in stored) == sorted(
        ODD_SCOPES
    )
    # The operator API takes and shows them verbatim too.
    admin = Admin(dsn=runtime_dsn, schema=migrated)
    ident = admin.trigger(ODD_JOB, ODD_SCOPES[0], datetime.now(UTC) + timedelta(days=1)).id
    assert ident is not None
    listed = {r.id: r for r in admin.runs(job=ODD_JOB, limit=50)}
    assert listed[ident].scope == ODD_SCOPES[0]
    assert ODD_JOB in {r.job for r in admin.status()}


@pytest.fixture
def restore_logging() -> Iterator[None]:
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


def test_line_separators_in_scopes_cannot_forge_json_log_lines(
    make_scheduler: SchedulerFactory,
    migrated: str,
    capsys: pytest.CaptureFixture[str],
    restore_logging: None,
) -> None:
    s = make_scheduler()
    s.register(ok, name=ODD_JOB, every="1d", scopes=ODD_SCOPES)
    capsys.readouterr()
    configure_logging("json", "info")
    assert s.run_once().succeeded == len(ODD_SCOPES)
    lines = capsys.readouterr().err.splitlines()
    events = [json.loads(line) for line in lines]  # every line is one whole JSON object
    claimed = [e for e in events if e["event"] == "claimed"]
    assert sorted(e["scope"] for e in claimed) == sorted(str(sc) for sc in ODD_SCOPES)
    assert {e["job"] for e in claimed} == {ODD_JOB}


def test_operator_calls_with_a_nul_job_name_give_a_config_error(
    runtime_dsn: str, migrated: str, db: Any
) -> None:
    admin = Admin(dsn=runtime_dsn, schema=migrated)
    before = snapshot(db, migrated)
    try:
        for call in (admin.pause, admin.resume, admin.trigger):
            with pytest.raises(pgsched.ConfigError, match="job"):
                call("bad\x00job")
    finally:
        assert snapshot(db, migrated) == before
