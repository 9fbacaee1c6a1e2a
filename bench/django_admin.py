"""How long pgsched's Django admin pages take at scale: ``python -m bench.django_admin [DSN]
[--keep]``.

Seeds a schema of its own (dropped afterwards unless ``--keep``) with about 10,000,000 ledger
rows as replicas would have left them after 40 days: an hourly job fanned out to 10,000
tenants (one run in 97 failed, after two attempts with their tracebacks), the test project's
small jobs (restock every minute, four hourly ones of which audit always fails) and its
dynamic job remind with 10,000 daily schedules. Then serves the test Django project
(tests/django_project) on that schema with ``manage.py runserver``, signs in a staff user
through the admin's login form and times each admin page over real HTTP: three rounds on
the ledger as seeded (ANALYZEd only), then three more after a VACUUM (ANALYZE) of it.
Results go to bench/results/django_admin.json.
"""

from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from bench.seeded import SeededSchema, main, timed

SCHEMA = "bench_django_admin"
TENANTS = 10_000
DAYS = 40
USERS = 10_000  # remind's schedules
ROUNDS = 3
RUNS = 7
BIG = "sync_tenants"
REPO = Path(__file__).resolve().parents[1]
PROJECT = REPO / "tests" / "django_project"
OUT = Path(__file__).parent / "results" / "django_admin.json"
STAFF, PASSWORD = "bench-staff", "bench-pw-5c1e"

# {s}: the schema; plan k (0 .. DAYS * 24 - 1) is k hours before the current hour. A failed
# run of the fan-out used both its attempts; the ledger row is the second.
_FAILED = "(i + k) %% 97 = 0"
_TRACEBACK = (
    "'Traceback (most recent call last):' || E'\\n'"
    " || repeat('  File \"/app/tenants/sync.py\", line 88, in sync' || E'\\n'"
    " || '    client.push(batch)' || E'\\n', 12)"
    " || 'RuntimeError: quota exceeded for tenant ' || e.scope_id"
)
SEED = [
    # Partitions for the 40 days back (the replicas made each day's as it came).
    "SELECT {s}.cron_ensure_partitions(ARRAY(SELECT generate_series("
    " now() - %(days)s * interval '1 day' - interval '2 days', now(), interval '1 day')), 64)",
    "INSERT INTO {s}.job_state (job_name, schedule, scopes, seen_at, seen_by, upcoming,"
    " max_attempts)"
    " SELECT name, schedule, scopes, now(), 'r1', ARRAY[date_trunc('hour', now())"
    "   + CASE WHEN schedule = 'every 1m' THEN interval '1 minute' ELSE interval '1 hour' END],"
    "   attempts"
    " FROM (VALUES ('" + BIG + "', 'every 1h', 'callable', 2),"
    "   ('restock', 'every 1m', 'global', 1),"
    "   ('settle', 'every 1h', 'global', 1), ('count_orders', 'every 1h', 'global', 1),"
    "   ('tally', 'every 1h', 'global', 1), ('audit', 'every 1h', 'global', 1),"
    "   ('remind', 'dynamic', NULL, 1)) AS j(name, schedule, scopes, attempts)",
    "INSERT INTO {s}.cron_cursors (job_name, scope_kind, scope_id, next_plan_time, due_at,"
    " spec, first_seen_at, last_plan_time, updated_at)"
    " SELECT '" + BIG + "', 'tenant', 't' || lpad(i::text, 5, '0'),"
    "   date_trunc('hour', now()) + interval '1 hour',"
    "   date_trunc('hour', now()) + interval '1 hour',"
    "   'every 1h', now() - %(days)s * interval '1 day', date_trunc('hour', now()), now()"
    " FROM generate_series(1, %(tenants)s) AS i",
    # remind's schedules: daily at 09:00-09:59 UTC, one in 50 paused.
    "INSERT INTO {s}.schedules (job_name, scope_kind, scope_id, cron, timezone, payload,"
    " paused, next_plan_time, created_at, updated_at)"
    " SELECT 'remind', 'user', 'u' || lpad(i::text, 5, '0'), (i %% 60) || ' 9 * * *', 'UTC',"
    "   jsonb_build_object('text', 'hello ' || i), i %% 50 = 0,"
    "   date_trunc('day', now()) + interval '1 day 9 hours' + (i %% 60) * interval '1 minute',"
    "   now() - %(days)s * interval '1 day', now()"
    " FROM generate_series(1, %(users)s) AS i",
    # The fan-out: 10,000 tenants x 960 hourly plans.
    "INSERT INTO {s}.cron_executions (job_name, scope_kind, scope_id, plan_time, trigger,"
    " status, attempt, max_attempts, runner_id, started_at, finished_at, duration_ms,"
    " rows_affected, error_code, error_msg, created_at, updated_at)"
    " SELECT '" + BIG + "', 'tenant', 't' || lpad(i::text, 5, '0'), p.t, 'schedule',"
    "   CASE WHEN " + _FAILED + " THEN 'FAILED' ELSE 'SUCCESS' END,"
    "   CASE WHEN " + _FAILED + " THEN 2 ELSE 1 END, 2, 'r' || (i %% 3),"
    "   p.t + (i %% 600) * interval '100 ms', p.t + (i %% 600) * interval '100 ms'"
    "     + (200 + i %% 300) * interval '1 ms', 200 + i %% 300, i %% 1000,"
    "   CASE WHEN " + _FAILED + " THEN 'handler_error' END,"
    "   CASE WHEN " + _FAILED + " THEN 'RuntimeError: quota exceeded for tenant t'"
    "     || lpad(i::text, 5, '0') END, p.t, p.t + interval '1 minute'"
    " FROM generate_series(0, %(days)s * 24 - 1) AS k,"
    "   LATERAL (SELECT date_trunc('hour', now()) - k * interval '1 hour' AS t) AS p,"
    "   generate_series(1, %(tenants)s) AS i",
    # The small jobs: restock every minute, four hourly ones; audit always fails.
    "INSERT INTO {s}.cron_executions (job_name, plan_time, trigger, status, runner_id,"
    " started_at, finished_at, duration_ms, error_code, error_msg, created_at, updated_at)"
    " SELECT j.name, p.t, 'schedule', CASE WHEN j.name = 'audit' THEN 'FAILED' ELSE 'SUCCESS'"
    "   END, 'r1', p.t + interval '20 ms', p.t + interval '60 ms', 40,"
    "   CASE WHEN j.name = 'audit' THEN 'handler_error' END,"
    "   CASE WHEN j.name = 'audit' THEN 'ValueError: ledger out of balance' END, p.t, p.t"
    " FROM (VALUES ('restock', interval '1 minute'), ('settle', interval '1 hour'),"
    "   ('count_orders', interval '1 hour'), ('tally', interval '1 hour'),"
    "   ('audit', interval '1 hour')) AS j(name, every),"
    "   LATERAL (SELECT generate_series(date_trunc('hour', now()) - %(days)s * interval '1 day'"
    "     + j.every, date_trunc('minute', now()), j.every) AS t) AS p",
    # remind: each schedule's daily run.
    "INSERT INTO {s}.cron_executions (job_name, scope_kind, scope_id, plan_time, trigger,"
    " status, runner_id, started_at, finished_at, duration_ms, payload, created_at,"
    " updated_at)"
    " SELECT 'remind', 'user', 'u' || lpad(i::text, 5, '0'), p.t, 'schedule', 'SUCCESS', 'r2',"
    "   p.t + interval '50 ms', p.t + interval '90 ms', 40,"
    "   jsonb_build_object('text', 'hello ' || i), p.t, p.t"
    " FROM generate_series(1, %(days)s) AS d,"
    "   LATERAL (SELECT date_trunc('day', now()) - d * interval '1 day'"
    "     + interval '9 hours' AS t0) AS b,"
    "   generate_series(1, %(users)s) AS i,"
    "   LATERAL (SELECT b.t0 + (i %% 60) * interval '1 minute' AS t) AS p",
    # The failed attempts of each FAILED row (both of the fan-out's, audit's one).
    "INSERT INTO {s}.cron_attempts (execution_id, fencing_token, attempt, runner_id,"
    " started_at, finished_at, error_code, error_msg, traceback, plan_time, status)"
    " SELECT e.id, e.fencing_token - e.attempt + a, a, e.runner_id,"
    "   e.started_at - (e.attempt - a) * interval '30 s',"
    "   e.finished_at - (e.attempt - a) * interval '30 s', e.error_code, e.error_msg,"
    "   " + _TRACEBACK + ", e.plan_time, 'FAILED'"
    " FROM {s}.cron_executions e, generate_series(1, e.attempt) AS a"
    " WHERE e.status = 'FAILED'",
    "ANALYZE {s}.cron_executions",
    "ANALYZE {s}.cron_attempts",
    "ANALYZE {s}.cron_cursors",
    "ANALYZE {s}.schedules",
    "ANALYZE {s}.job_state",
]

SEEDED = SeededSchema(
    SCHEMA,
    SEED,
    {"tenants": TENANTS, "days": DAYS, "users": USERS},
    {"ledger_rows": "cron_executions", "attempts": "cron_attempts", "schedules": "schedules"},
)

# The pages timed: name -> the admin path and query ("next 2": that page's Next link followed
# twice; "detail": the first row's execution page of that page).
PAGES: dict[str, tuple[str, str]] = {
    "jobs changelist": ("/admin/pgsched/job/", ""),
    "executions, no filter": ("/admin/pgsched/execution/", ""),
    f"executions of {BIG} (10,000 scopes)": ("/admin/pgsched/execution/", f"job={BIG}"),
    f"executions of {BIG}, FAILED": ("/admin/pgsched/execution/", f"job={BIG}&status=FAILED"),
    f"executions of {BIG}, third page": ("/admin/pgsched/execution/", f"job={BIG}&next=2"),
    "executions of restock (small job)": ("/admin/pgsched/execution/", "job=restock"),
    "execution detail (FAILED, 2 attempts)": (
        "/admin/pgsched/execution/",
        f"job={BIG}&status=FAILED&detail=1",
    ),
    "schedules of remind (10,000)": ("/admin/pgsched/schedule/", "job=remind"),
}
_NEXT = re.compile(r'id="pgsched-next" href="([^"]+)"')
_ROW = re.compile(r'href="(/admin/pgsched/execution/[0-9a-f-]{36}/)"')


class Site:
    """The test project served by ``manage.py runserver`` on the seeded schema, and a staff
    user's session on it (signed in through the admin's login form)."""

    def __init__(self, dsn: str, marks: Path) -> None:
        self.env = {
            **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
            "PGSCHED_TEST_DSN": dsn,
            "PGSCHED_TEST_SCHEMA": SCHEMA,
            "SHOP_MARKS": str(marks),
            # this checkout's pgsched, whatever the virtualenv has
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        self.port = 0
        self.cookies: dict[str, str] = {}
        self.server: subprocess.Popen[bytes] | None = None

    def manage(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=PROJECT,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"manage.py {args[0]}:\n{done.stdout}{done.stderr}"
        return done.stdout

    def start(self, log: Path) -> None:
        # Django's tables go to the seeded schema (the settings' search_path); pgsched's
        # migration, which Django's runs too, finds nothing to do.
        self.manage("migrate")
        self.manage(
            "shell",
            "-c",
            "from django.contrib.auth.models import User\n"
            f"User.objects.filter(username={STAFF!r}).exists() or"
            f" User.objects.create_superuser({STAFF!r}, 'staff@example.com', {PASSWORD!r})",
        )
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{self.port}", "--noreload"],
            cwd=PROJECT,
            env=self.env,
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            assert self.server.poll() is None, log.read_text()[-3000:]
            try:
                self.get("/admin/login/")
                break
            except OSError:
                assert time.monotonic() < deadline, "runserver did not answer in 60 s"
                time.sleep(0.3)
        self._sign_in()

    def stop(self) -> None:
        if self.server is not None:
            self.server.terminate()
            self.server.wait(20)

    def request(
        self, method: str, path: str, form: Mapping[str, str] | None = None
    ) -> tuple[int, str, str]:
        """One request on a connection of its own: the status, the Location and the body."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        body = None
        if form is not None:
            body = urllib.parse.urlencode(form)
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            conn.request(method, path, body, headers)
            answer = conn.getresponse()
            text = answer.read().decode()
            for name, value in answer.getheaders():
                if name.lower() == "set-cookie":
                    key, _, rest = value.partition("=")
                    self.cookies[key] = rest.split(";", 1)[0]
            return answer.status, answer.getheader("Location") or "", text
        finally:
            conn.close()

    def get(self, path: str) -> str:
        status, _, body = self.request("GET", path)
        assert status == 200, (path, status, body[-2000:])
        return body

    def _sign_in(self) -> None:
        form = self.get("/admin/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', form)
        assert token is not None, form[-2000:]
        status, location, body = self.request(
            "POST",
            "/admin/login/",
            {
                "csrfmiddlewaretoken": token.group(1),
                "username": STAFF,
                "password": PASSWORD,
                "next": "/admin/",
            },
        )
        assert status == 302 and "sessionid" in self.cookies, (status, location, body[-2000:])

    def url(self, path: str, query: str) -> str:
        """The URL a page is timed at: Next links and the detail link are followed first
        (once, untimed)."""
        params = urllib.parse.parse_qs(query)
        hops = int(params.pop("next", ["0"])[0])
        detail = params.pop("detail", None)
        url = path + ("?" + urllib.parse.urlencode(params, doseq=True) if params else "")
        for _ in range(hops):
            found = _NEXT.search(self.get(url))
            assert found is not None, url
            url = path + found.group(1).replace("&amp;", "&")
        if detail:
            row = _ROW.search(self.get(url))
            assert row is not None, url
            url = row.group(1)
        return url


async def _rounds(site: Site, urls: Mapping[str, str], phase: str) -> list[dict[str, Any]]:
    rounds: list[dict[str, Any]] = []
    for n in range(1, ROUNDS + 1):
        pages: dict[str, dict[str, Any]] = {}
        for name, url in urls.items():

            async def page(url: str = url) -> str:
                return site.get(url)

            figures, body = await timed(page, RUNS)
            pages[name] = {**figures, "html_kb": round(len(body.encode()) / 1024, 1)}
            print(
                f"{phase} round {n}  {name:42} median {figures['median_ms']:7.1f} ms  max "
                f"{figures['max_ms']:7.1f} ms  {pages[name]['html_kb']} KiB",
                flush=True,
            )
        rounds.append(pages)
    return rounds


def _vacuum(dsn: str) -> float:
    """VACUUM (ANALYZE) of the ledger and its attempts: the seconds it took. It sets the
    visibility map, as autovacuum would have on a deployment's older partitions (this server
    runs with autovacuum off), which the index-only counts of ``status`` depend on."""
    started = time.monotonic()
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in ("cron_executions", "cron_attempts"):
            conn.execute(
                sql.SQL("VACUUM (ANALYZE) {}.{}").format(
                    sql.Identifier(SCHEMA), sql.Identifier(table)
                )
            )
    return round(time.monotonic() - started, 1)


async def measure(dsn: str) -> dict[str, Any]:
    work = Path(os.environ.get("TMPDIR", "/tmp")) / "bench_django_admin"
    work.mkdir(parents=True, exist_ok=True)
    site = Site(dsn, work / "marks")
    site.start(work / "runserver.log")
    try:
        urls = {name: site.url(path, query) for name, (path, query) in PAGES.items()}
        seeded = await _rounds(site, urls, "analyzed")
        took = _vacuum(dsn)
        print(f"VACUUM (ANALYZE) of the ledger and attempts: {took} s", flush=True)
        vacuumed = await _rounds(site, urls, "vacuumed")
    finally:
        site.stop()
    return {
        "server": "manage.py runserver --noreload (WSGI), one request per connection",
        "urls": urls,
        "rounds_analyzed": seeded,
        "vacuum_s": took,
        "rounds_vacuumed": vacuumed,
    }


if __name__ == "__main__":
    sys.exit(
        main(
            sys.argv[1:],
            SEEDED,
            measure,
            OUT,
            {"tenants": TENANTS, "days": DAYS, "runs": RUNS, "rounds_count": ROUNDS},
        )
    )
