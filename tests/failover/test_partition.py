"""A partition that drops packets: three `pgsched run` replicas on a private primary (and its
hot standby, which nobody promotes), and every packet one of them (run as another user) sends
to the primary dropped by iptables for a phase, then flowing again (``tests.support.partition``).
Nothing is refused, so the cut-off replica learns of the partition only from statements that
go unanswered. The others must run every plan meanwhile; the cut-off one must say it is
unhealthy (/healthz 503) within its health timeout (and the time its first unanswered
statement takes to count as failed), and work again soon after the packets flow; no
transactional plan commits twice and no fencing token goes back.

CI-sized by default (15 s cut off, a health timeout of 5 s); ``PGSCHED_FAILOVER_LONG=1`` cuts it
off for 60 s with the default health timeout of 20 s.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest

from tests.failover import figures as fig
from tests.failover.scenario import TODAY, FailoverRun, measure, report, side_effects
from tests.support.partition import dropped
from tests.support.waiting import wait_until

pytestmark = pytest.mark.failover

LONG = os.environ.get("PGSCHED_FAILOVER_LONG") == "1"
CUT_S = 60.0 if LONG else 15.0
HEALTH_S = 20.0 if LONG else 5.0
ANSWER_S = 5.0  # the replicas' answer timeout (the default): a statement unanswered this long fails
BACK_S = 30.0  # the cut-off replica works again within this long after the packets flow
CUT = "r3"


@pytest.fixture
def side(pg_dsn: str, schema: str) -> tuple[str, str]:
    return pg_dsn, schema


def _first_status(run: FailoverRun, status: int, after: float) -> float | None:
    """When the cut-off replica's /healthz first answered ``status`` after ``after``."""
    return next((t for t, r, s in run.samples if r == CUT and s == status and t > after), None)


def _first_work(run: FailoverRun, after: float) -> float | None:
    """When an execution the cut-off replica ran was first recorded after ``after``."""
    times = [e["at"] for e in side_effects(run) if e["runner"] == CUT and e["at"] > after]
    return min(times, default=None)


def test_a_replica_whose_packets_are_dropped_fails_its_health_and_comes_back(
    tmp_path: Path, side: tuple[str, str]
) -> None:
    run = FailoverRun(
        "packets dropped",
        tmp_path,
        side,
        runners=("r1", "r2", CUT),
        cut=CUT,
        replica_env={"PGSCHED_HEALTH_TIMEOUT": f"{HEALTH_S:g}s"},
    )
    try:
        run.setup()
        run.warm_up()
        run.fault()
        cut_at = run.marks["fault"]
        # Nobody is promoted: the leases handed out from the cut on are the fencing's measure.
        run.marks["promoted"] = cut_at
        with dropped(run.old.port):
            time.sleep(CUT_S)  # a fixed phase: the others work, the cut-off one cannot
        healed = run.marks["healed"] = time.time()
        with contextlib.suppress(AssertionError):  # not back in time: measured below as None
            wait_until(lambda: _first_work(run, healed) is not None, BACK_S, "r3 to work again")
        run.run_after()
        unhealthy, healthy = _first_status(run, 503, cut_at), _first_status(run, 200, healed)
        back = _first_work(run, healed)
        figures = measure(run, resumed_s=0.0)
        figures.update(
            {
                "cut_s": CUT_S,
                "health_timeout_s": HEALTH_S,
                "cut_503_s": None if unhealthy is None else round(unhealthy - cut_at, 2),
                "cut_200_again_s": None if healthy is None else round(healthy - healed, 2),
                "cut_works_again_s": None if back is None else round(back - healed, 2),
                "cut_ran_during": sum(
                    1
                    for e in side_effects(run)
                    if e["runner"] == CUT and cut_at + ANSWER_S < e["at"] < healed
                ),
            }
        )
        report(
            run,
            figures,
            [
                *TODAY,
                fig.Check("work_lost", "==", 0),
                fig.Check("tx_lost", "==", 0),
                fig.Check("fencing_regressions", "==", 0),
                fig.Check("stale_running", "==", 0),
                fig.Check("running_after_stop", "==", 0),
                fig.Check("cut_ran_during", "==", 0),  # the cut held: it claimed nothing
                # the health timeout, after the first statement left unanswered has failed
                fig.Check("cut_503_s", "<=", HEALTH_S + ANSWER_S + 1.0),
                fig.Check("cut_works_again_s", "<=", BACK_S),
                fig.Check("cut_200_again_s", "<=", BACK_S),
            ],
        )
    finally:
        run.close()
