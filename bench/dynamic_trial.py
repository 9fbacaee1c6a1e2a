"""One trial of a schedules-as-data workload (g, h, i): a :class:`~bench.trial.Trial` whose
timeline (:mod:`bench.dynamic_timeline`) also runs the contender's driver process, and whose
result adds the driver's put rate and, for the churn, its checks (:mod:`bench.churn`).

A contender that cannot run the workload's full size on the benchmark's machine is given
fewer schedules (:meth:`~bench.dynamic_schedulers.DynamicContender.size`), and its result
says so (``size_note``).
"""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg

from bench import REPO, churn, measure, pg
from bench.dynamic_schedulers import DynamicContender
from bench.dynamic_timeline import dynamic_timeline
from bench.peers.common import LEDGER_TABLE
from bench.timeline import Window
from bench.trial import Options, Trial
from bench.workloads import Workload

CHURN_THREADS = 4  # the driver's threads sending replacements and deletes


class DynamicTrial(Trial):
    def __init__(
        self,
        server: pg.Server,
        wl: Workload,
        contender: DynamicContender,
        opts: Options,
        python: str,
        run_dir: Path,
    ) -> None:
        wl, self.size_note = contender.size(wl)
        opts = replace(opts, replicas=contender.processes(opts.replicas))
        super().__init__(server, wl, contender, opts, python, run_dir)  # type: ignore[arg-type]
        self.dynamic = contender
        self.settle_s = contender.settle_s
        self.put_cap_s = opts.put_cap_s
        self.driven: dict[str, Any] = {}

    # -- the driver ---------------------------------------------------------------------------

    def drive(self, args: list[str], timeout_s: float) -> None:
        name = "-".join(args[:2])
        with open(self.run_dir / f"driver-{name}.log", "wb") as out:
            done = subprocess.run(
                [*self.dynamic.driver(self.python), *args],
                cwd=REPO,
                env=self.env(0),
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=timeout_s,
            )
        if done.returncode != 0:
            log = (self.run_dir / f"driver-{name}.log").read_text(errors="replace")
            raise RuntimeError(f"driver {' '.join(args)} failed: {log.strip()[-300:]}")

    def put(self, kind: str) -> dict[str, Any]:
        """Put the workload's schedules of ``kind`` through the contender's API; its rate."""
        args = ["put", kind, str(self.wl.scopes), str(self.wl.batch), str(self.put_cap_s)]
        self.drive(args, self.put_cap_s + 300)
        result: dict[str, Any] = json.loads((self.run_dir / f"put-{kind}.json").read_text())
        self.driven["put"] = result
        return result

    def churn(self) -> dict[str, Any]:
        wl = self.wl
        args = ["churn", str(wl.scopes), str(wl.churn_per_s), str(wl.window_s)]
        self.drive([*args, str(CHURN_THREADS)], wl.window_s + 300)
        result: dict[str, Any] = json.loads((self.run_dir / "churn.json").read_text())
        self.driven["churn"] = result
        return result

    def drain(self, plans_until: float, quiet_s: int = 4, cap_s: float = 60) -> None:
        """Until no execution of a plan due by ``plans_until`` (epoch seconds) has started for
        ``quiet_s`` seconds, ``cap_s`` passes, or a replica exits."""
        query = f"SELECT count(*) FROM {LEDGER_TABLE} WHERE plan_time <= to_timestamp(%s)"
        deadline, last, still = time.monotonic() + cap_s, -1, 0
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while time.monotonic() < deadline and still < quiet_s and self.alive():
                row = conn.execute(query, (plans_until,)).fetchone()
                count = int(row[0]) if row else 0
                still, last = (still + 1, last) if count == last else (0, count)
                time.sleep(1)

    # -- the trial ----------------------------------------------------------------------------

    def execute(self) -> dict[str, Any]:
        load = measure.loadavg()
        self.setup()
        now = self.db_now()
        timeline = dynamic_timeline(self.wl, self.opts.warmup_s, self.opts.drain_cap_s)
        window = timeline.run(self, now)
        return self.collect(window, load)

    def collect(self, window: Window, load: list[float]) -> dict[str, Any]:
        result = super().collect(window, load)
        put = self.driven.get("put", {})
        result.update(
            schedules=self.wl.scopes,
            size_note=self.size_note,
            note=self.dynamic.note,
            put_schedules=put.get("put"),
            put_per_s=put.get("per_s"),
            put_seconds=put.get("seconds"),
            put_batch=put.get("batch"),
            put_batch_s_max=put.get("batch_s_max"),
        )
        if put and put.get("put", 0) < put.get("requested", 0):
            result["size_note"] = (
                f"{put['put']:,} of {put['requested']:,} put within the {self.put_cap_s:.0f}-s "
                "cap on the put"
            )
        if "churn" in self.driven:
            result.update(churn.churn_stats(self.dsn, self.dynamic.claims_sql(), self.run_dir))
        return result
