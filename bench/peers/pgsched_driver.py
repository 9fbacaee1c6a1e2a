"""The driver of the schedules-as-data workloads for pgsched: puts, replaces and deletes the
dynamic job's schedules through the public ``pgsched.Admin`` (see bench.peers.dynamic).

``python -m bench.peers.pgsched_driver put KIND COUNT BATCH CAP_S`` |
``churn COUNT PER_S SECONDS THREADS``.
"""

from __future__ import annotations

import sys
import time

import pgsched
from bench.peers import common, dynamic


class PgschedAdapter:
    cadences = dynamic.CHURN_CADENCES

    def __init__(self) -> None:
        self.cfg = common.config()
        self.admin = pgsched.Admin(dsn=self.cfg.dsn)

    @staticmethod
    def spec(s: dynamic.Spec) -> pgsched.ScheduleSpec:
        scope = pgsched.Scope("user", s.scope)
        if s.every_s is not None:
            return pgsched.ScheduleSpec(scope, every=s.every_s)
        return pgsched.ScheduleSpec(scope, cron=s.cron, timezone=s.zone)

    def put(self, specs: list[dynamic.Spec]) -> None:
        self.admin.put_schedules(self.cfg.job, [self.spec(s) for s in specs])

    def delete(self, scope: str) -> None:
        self.admin.delete_schedule(self.cfg.job, pgsched.Scope("user", scope))

    def wait_registered(self, timeout_s: float = 60) -> None:
        """Until a replica has registered the job (Admin refuses it before)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.admin.list_schedules(self.cfg.job, limit=1)
                return
            except pgsched.NotFoundError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


def make() -> PgschedAdapter:
    return PgschedAdapter()


if __name__ == "__main__":
    make().wait_registered()
    dynamic.drive(make, sys.argv[1:])
