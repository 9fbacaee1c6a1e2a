"""Schedules as data (workloads g, h, i): the schedules every contender is given, and the
driver process that puts, replaces and deletes them through the contender's own API.

A schedule here is a :class:`Spec`: a scope id and either a 5-field cron expression in an
IANA zone or a cadence in seconds (epoch-aligned, like pgsched's ``every``). Each contender's
peer module turns a Spec into its own form (``pgsched.ScheduleSpec``, a DBOS schedule, a
django-celery-beat ``PeriodicTask``) in a :class:`Adapter`, and runs :func:`drive` with it:

* ``drive put KIND COUNT``: puts COUNT schedules of KIND (``bulk``: random crons over 24
  zones, none due within the next hour; ``due``: ``* * * * *``; ``churn``: cadences) in
  batches, and writes the rate to ``<run_dir>/put.json``.
* ``drive churn``: replaces (a different cadence), deletes and re-puts random schedules at
  ``churn_per_s`` operations a second for ``churn_s`` seconds, from a few threads, and writes
  every operation with the wall-clock instants before it was sent and after it returned
  (its commit lies between) to ``<run_dir>/churn.jsonl``.

Standard library only: it runs in the project's and the peers' virtualenvs alike.
"""

from __future__ import annotations

import json
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from bench.peers import common

# 24 IANA zones: whole-hour, half-hour and quarter-hour offsets, with and without DST.
ZONES = (
    "UTC",
    "Europe/Berlin",
    "Europe/London",
    "Europe/Moscow",
    "America/New_York",
    "America/Chicago",
    "America/Denver",
    "America/Los_Angeles",
    "America/Sao_Paulo",
    "America/St_Johns",
    "America/Mexico_City",
    "Asia/Tokyo",
    "Asia/Shanghai",
    "Asia/Kolkata",
    "Asia/Kathmandu",
    "Asia/Dubai",
    "Asia/Singapore",
    "Asia/Tehran",
    "Australia/Sydney",
    "Australia/Adelaide",
    "Pacific/Auckland",
    "Pacific/Honolulu",
    "Africa/Cairo",
    "Africa/Lagos",
)
CHURN_CADENCES = (10, 15, 20, 30)  # seconds: every one divides a minute (DBOS cron seconds)
MINUTE_CADENCES = (60, 120)  # for a scheduler without seconds (celery's crontab)
SEED = 20261123
DELETE_SHARE = 0.1  # of the churn's operations on a scope that has a schedule
CHURN_STEP_S = 0.2  # each driver thread sends its share of the operations this often


@dataclass(frozen=True)
class Spec:
    scope: str
    cron: str | None = None  # 5 fields, in ``zone``
    every_s: int | None = None  # epoch-aligned cadence
    zone: str = "UTC"

    def to_json(self) -> dict[str, Any]:
        return {"scope": self.scope, "cron": self.cron, "every_s": self.every_s, "zone": self.zone}


def scope_id(i: int) -> str:
    return f"{i:07d}"


# -- the schedules of each workload -------------------------------------------------------------


def busy_hours(zone: str, start: datetime, span: timedelta) -> set[int]:
    """The local hours of ``zone`` that ``[start, start + span]`` touches."""
    tz, hours, t = ZoneInfo(zone), set(), start
    while t <= start + span:
        hours.add(t.astimezone(tz).hour)
        t += timedelta(minutes=5)
    return hours | {(start + span).astimezone(tz).hour}


def random_cron(rng: random.Random, hours: Sequence[int]) -> str:
    """A random 5-field expression whose hour field only holds ``hours``."""
    h, h2 = rng.choice(hours), rng.choice(hours)
    m = rng.randrange(60)
    form = rng.randrange(6)
    if form == 0:
        return f"{m} {h} * * *"
    if form == 1:
        return f"{m} {h} * * 1-5"
    if form == 2:
        return f"{m} {h} {rng.randrange(1, 29)} * *"
    if form == 3:
        return f"{m} {h} * * {rng.randrange(7)}"
    if form == 4 and h != h2:
        return f"{m} {min(h, h2)},{max(h, h2)} * * *"
    return f"*/{rng.choice((5, 10, 15, 20, 30))} {h} * * *"


def bulk_specs(count: int, start: datetime, quiet: timedelta) -> Iterator[Spec]:
    """Random crons over :data:`ZONES`, none of which fires in ``[start, start + quiet]``:
    their hour fields leave out the local hours that span touches."""
    rng = random.Random(SEED)
    allowed = {z: [h for h in range(24) if h not in busy_hours(z, start, quiet)] for z in ZONES}
    for i in range(count):
        zone = ZONES[i % len(ZONES)]
        yield Spec(scope_id(i), cron=random_cron(rng, allowed[zone]), zone=zone)


def due_specs(count: int) -> Iterator[Spec]:
    """``* * * * *`` in every zone: all of them due at the same minute."""
    for i in range(count):
        yield Spec(scope_id(i), cron="* * * * *", zone=ZONES[i % len(ZONES)])


def churn_specs(count: int, cadences: Sequence[int]) -> Iterator[Spec]:
    rng = random.Random(SEED)
    for i in range(count):
        yield Spec(scope_id(i), every_s=rng.choice(cadences))


# -- the driver ---------------------------------------------------------------------------------


class Adapter(Protocol):
    """How one contender puts and deletes schedules (one instance per driver thread)."""

    @property
    def cadences(self) -> Sequence[int]:
        """The churn cadences it can express."""
        ...

    def put(self, specs: list[Spec]) -> None:
        """Create or replace ``specs`` (one call of the contender's batch API)."""
        ...

    def delete(self, scope: str) -> None: ...


def batches(items: Iterator[Spec], size: int) -> Iterator[list[Spec]]:
    batch: list[Spec] = []
    for item in items:
        batch.append(item)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


def put_all(adapter: Adapter, kind: str, count: int, batch: int, cap_s: float) -> dict[str, Any]:
    """Put ``count`` schedules of ``kind`` in batches (stops after ``cap_s``); the rate."""
    specs = {
        "bulk": lambda: bulk_specs(count, datetime.now(UTC), timedelta(minutes=70)),
        "due": lambda: due_specs(count),
        "churn": lambda: churn_specs(count, adapter.cadences),
    }[kind]()
    done, spent, per_batch = 0, 0.0, []
    started = time.time()
    for chunk in batches(specs, batch):
        t = time.perf_counter()
        adapter.put(chunk)
        took = time.perf_counter() - t
        done, spent = done + len(chunk), spent + took
        per_batch.append(round(took, 3))
        if time.time() - started > cap_s:
            break
    return {
        "kind": kind,
        "requested": count,
        "put": done,
        "batch": batch,
        "seconds": round(spent, 3),
        "per_s": round(done / spent, 1) if spent else None,
        "batch_s_max": max(per_batch, default=None),
        "started": started,
        "finished": time.time(),
    }


class Churn:
    """Replaces, deletes and re-puts random schedules at a target rate from a few threads;
    every operation is logged with the instants before it was sent and after it returned."""

    def __init__(self, make: Callable[[], Adapter], count: int, per_s: int, threads: int) -> None:
        self.make, self.per_s, self.threads = make, per_s, threads
        cadences = make().cadences
        self.state = {s.scope: s.every_s for s in churn_specs(count, cadences)}
        self.cadences = cadences
        self.lock = threading.Lock()
        self.busy: set[str] = set()  # scopes with an operation in flight
        self.log: list[dict[str, Any]] = []
        self.rng = random.Random(SEED + 1)

    def pick(self, n: int) -> tuple[list[Spec], list[str]]:
        """``n`` operations on distinct scopes with nothing in flight: puts (a replacement with
        another cadence, or a re-put of a deleted scope) and deletes (:data:`DELETE_SHARE` of the
        scopes that have a schedule). Each scope stays busy until its operation is recorded."""
        puts: list[Spec] = []
        deletes: list[str] = []
        with self.lock:
            idle = [s for s in self.state if s not in self.busy]
            for scope in self.rng.sample(idle, min(n, len(idle))):
                self.busy.add(scope)
                current = self.state[scope]
                if current is not None and self.rng.random() < DELETE_SHARE:
                    deletes.append(scope)
                    self.state[scope] = None
                else:
                    every = self.rng.choice([c for c in self.cadences if c != current])
                    puts.append(Spec(scope, every_s=every))
                    self.state[scope] = every
        return puts, deletes

    def record(self, op: str, scope: str, every: int | None, t0: float, t1: float) -> None:
        with self.lock:
            self.log.append({"op": op, "scope": scope, "every_s": every, "t0": t0, "t1": t1})
            self.busy.discard(scope)

    def worker(self, until: float, share: float) -> None:
        adapter = self.make()
        step, owed = CHURN_STEP_S, 0.0  # operations owed carry over: rates need not divide
        next_at = time.time()
        while time.time() < until:
            owed = min(owed + self.per_s * share * step, self.per_s * share)  # a second at most
            puts, deletes = self.pick(int(owed))
            owed -= len(puts) + len(deletes)
            if puts:
                t0 = time.time()
                adapter.put(puts)
                t1 = time.time()
                for s in puts:
                    self.record("put", s.scope, s.every_s, t0, t1)
            for scope in deletes:
                t0 = time.time()
                adapter.delete(scope)
                self.record("delete", scope, None, t0, time.time())
            next_at += step
            time.sleep(max(0.0, next_at - time.time()))

    def run(self, seconds: float) -> dict[str, Any]:
        started = time.time()
        until = started + seconds
        threads = [
            threading.Thread(target=self.worker, args=(until, 1 / self.threads), daemon=True)
            for _ in range(self.threads)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        finished = time.time()
        ops = len(self.log)
        return {
            "ops": ops,
            "puts": sum(1 for e in self.log if e["op"] == "put"),
            "deletes": sum(1 for e in self.log if e["op"] == "delete"),
            "started": started,
            "finished": finished,
            "ops_per_s": round(ops / max(finished - started, 1e-9), 1),
        }


def drive(make: Callable[[], Adapter], argv: list[str]) -> None:
    """``drive put KIND COUNT BATCH CAP_S`` or ``drive churn COUNT PER_S SECONDS THREADS``."""
    cfg = common.config()
    run_dir = Path(cfg.run_dir)
    if argv[0] == "put":
        kind, count, batch, cap_s = argv[1], int(argv[2]), int(argv[3]), float(argv[4])
        adapter = make()
        result = put_all(adapter, kind, count, batch, cap_s)
        (run_dir / f"put-{kind}.json").write_text(json.dumps(result))
        if kind == "churn":  # the churn checks start from these (bench.churn)
            initial = churn_specs(result["put"], adapter.cadences)
            (run_dir / "initial.json").write_text(json.dumps({s.scope: s.every_s for s in initial}))
    elif argv[0] == "churn":
        count, per_s, seconds, threads = int(argv[1]), int(argv[2]), float(argv[3]), int(argv[4])
        churn = Churn(make, count, per_s, threads)
        result = churn.run(seconds)
        with open(run_dir / "churn.jsonl", "w", encoding="utf-8") as out:
            for entry in churn.log:
                out.write(json.dumps(entry) + "\n")
        (run_dir / "churn.json").write_text(json.dumps(result))
    else:
        raise SystemExit(f"unknown driver command {argv}")
    print(json.dumps(result), file=sys.stderr)
