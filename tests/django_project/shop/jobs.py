"""The shop's jobs, found by pgsched.django when the apps are loaded."""

from __future__ import annotations

import os
from pathlib import Path

from pgsched import Run
from pgsched.django import scheduler


@scheduler.job(every="1s")
def restock(run: Run) -> int:
    # What the test sees: one file per run, named by the replica that ran it.
    marks = Path(os.environ["SHOP_MARKS"])
    marks.mkdir(parents=True, exist_ok=True)
    (marks / f"{run.execution_id}").write_text(run.runner_id)
    return 1  # one shelf restocked
