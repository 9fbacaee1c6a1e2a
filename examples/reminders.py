"""Per-user reminders: the example APP of docs/schedules.md ("Schedules as data").

The ``reminder`` job is dynamic: it has no schedule in code. Each user's reminder is a
stored schedule of its own (cron expression and IANA zone, or a cadence; a payload with the
text), put, replaced, paused, resumed and deleted at run time by the application, the
``pgsched schedules`` commands or the HTTP API. Every replica runs the same job; each plan
of each schedule runs once.

    export PGSCHED_DSN=postgresql://...
    pgsched migrate
    pgsched run examples/reminders.py      # every replica (starts nothing else)
    python examples/reminders.py           # puts a few demo schedules, then exits
"""

from __future__ import annotations

import os

import pgsched

scheduler = pgsched.Scheduler(schema=os.environ.get("PGSCHED_SCHEMA", "pgsched"))


@scheduler.job(
    name="reminder",
    dynamic=True,  # each scope (a user) has a stored schedule of its own
    run_timeout="1m",
    max_attempts=3,  # these options apply to every schedule of the job
    retry_backoff=["10s", "1m"],
    max_lateness="1h",  # a reminder more than an hour late is skipped, not sent
)
async def reminder(run: pgsched.Run) -> None:
    text = run.payload.get("text", "(no text)")  # the schedule's payload as of the claim
    await send(run.scope.id, text)
    run.log.info("reminder_sent", user=run.scope.id, text=text)


async def send(user_id: str, text: str) -> None:
    """Stands in for an e-mail or push notification."""
    print(f"reminder for user {user_id}: {text}", flush=True)


DEMO = [
    pgsched.ScheduleSpec(
        pgsched.Scope("user", "42"),
        cron="0 9 * * 1-5",
        timezone="Europe/Berlin",
        payload={"text": "stand-up in 15 minutes"},
    ),
    pgsched.ScheduleSpec(
        pgsched.Scope("user", "7"),
        cron="30 18 * * *",
        timezone="America/New_York",
        payload={"text": "log your hours"},
    ),
    pgsched.ScheduleSpec(
        pgsched.Scope("user", "demo"),
        every="1m",
        payload={"text": "stretch your legs"},
    ),
]


def main() -> None:
    """Put the demo schedules (all or nothing) and list them, a page at a time."""
    scheduler.migrate()
    written = scheduler.put_schedules("reminder", DEMO)
    print(f"wrote {written} of {len(DEMO)} schedules (an identical one is not rewritten)")
    after: pgsched.Scope | None = None
    while page := scheduler.list_schedules("reminder", after=after, limit=100):
        for s in page:
            spec = f"every {s.every}" if s.every is not None else f"{s.cron!r} in {s.timezone}"
            due = s.next_plan_time
            nxt = "none left" if due is None else f"{due:%Y-%m-%d %H:%M} UTC"
            print(f"  {s.scope}: {spec}, next plan {nxt}")
        after = page[-1].scope


if __name__ == "__main__":
    main()
