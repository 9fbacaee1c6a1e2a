"""``python -m bench.chart RESULTS.json OUT.png``: completed plans/s and p99 start lag
against the number of scopes, one line per scheduler, and the schedules-as-data workloads'
bulk put rate and start lag, one bar per scheduler (needs matplotlib: the peers' venv)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.registry import ALL_KEYS, DYNAMIC, REGISTRY, label


def points(report: dict[str, Any], sched: str) -> list[tuple[int, float, float, str]]:
    """(scopes, completed plans/s, p99 lag s, workload) of the regular workloads."""
    workloads = report["workloads"]
    out = []
    for r in report["results"]:
        wl = workloads.get(r["workload"], {})
        if r["scheduler"] != sched or r.get("status") != "ok":
            continue
        if wl.get("idle") or wl.get("catch_up") or wl.get("schedules"):
            continue  # not a fan-out of one schedule (the table has them)
        if not r.get("due") or not r.get("completed"):
            continue  # nothing completed: no throughput or lag to draw (see the table)
        out.append((wl["scopes"], r["plans_per_s"], r["lag_p99_s"] or 0.0, r["workload"]))
    return sorted(out)


def none_completed(report: dict[str, Any]) -> list[str]:
    workloads = report["workloads"]
    return [
        f"{label(r['scheduler'])} at {workloads[r['workload']]['scopes']:,}"
        for r in report["results"]
        if r.get("status") == "ok"
        and r.get("due")
        and not r.get("completed")
        and not workloads[r["workload"]].get("schedules")  # the third panel says it
    ]


def dynamic_bars(report: dict[str, Any], ax: Any) -> None:
    """Schedules as data: (g) schedules put per second, (h) p99 start lag, per scheduler."""
    rows = {
        (r["workload"], r["scheduler"]): r
        for r in report["results"]
        if r.get("status") == "ok" and report["workloads"].get(r["workload"], {}).get("schedules")
    }
    keys = [k for k in DYNAMIC if any(s == k for _, s in rows)]
    if not keys:
        ax.set_axis_off()
        return
    names = []
    for i, key in enumerate(keys):
        g, h = rows.get(("g", key), {}), rows.get(("h", key), {})
        if g.get("put_per_s"):
            ax.bar(i, g["put_per_s"], color=DYNAMIC[key].style.get("color"))
            ax.annotate(f"{g['put_schedules']:,}", (i, g["put_per_s"]), ha="center", fontsize=7)
        lag = h.get("lag_p99_s")
        below = f"\nh: p99 {lag:.2f} s" if lag is not None else ""
        if h.get("due") and not h.get("completed"):
            below = "\nh: none completed"
        names.append(label(key).split(" ")[0] + below)
    ax.axhline(50_000, color="0.6", linewidth=0.8, linestyle=":")
    ax.annotate("goal 50,000/s", (-0.4, 50_000), fontsize=7, color="0.4", va="bottom")
    ax.set(
        yscale="log",
        xticks=range(len(keys)),
        xticklabels=names,
        ylabel="schedules put per second (g; over each bar: how many)",
        title="Schedules as data: bulk put",
    )
    ax.grid(True, which="both", axis="y", alpha=0.3)


def draw(report: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 4.8))
    for sched in ALL_KEYS:
        pts = points(report, sched)
        if not pts:
            continue
        xs = [p[0] for p in pts]
        line = {"label": label(sched), **(REGISTRY.get(sched) or DYNAMIC[sched]).style}
        ax1.plot(xs, [p[1] for p in pts], **line)
        ax2.plot(xs, [max(p[2], 0.01) for p in pts], **line)
    ax1.set(
        xscale="log",
        yscale="log",
        xlabel="scopes per job",
        ylabel="completed plans/s (fan-out / time to start it)",
        title="Throughput of one fan-out",
    )
    ax2.set(
        xscale="log",
        yscale="log",
        xlabel="scopes per job",
        ylabel="p99 start lag (s)",
        title="p99 start lag (handler start - due time)",
    )
    ax2.axhline(1.0, color="0.6", linewidth=0.8, linestyle=":")
    for ax in (ax1, ax2):
        ax.grid(True, which="both", alpha=0.3)
    ax1.legend(loc="best", fontsize=8)
    dynamic_bars(report, ax3)
    machine = report.get("machine", {})
    fig.suptitle(
        f"pgsched benchmark: {report.get('options', {}).get('replicas', 3)} replicas, "
        f"PostgreSQL {report.get('postgres', {}).get('version', '?').split()[0]}, "
        f"{machine.get('cores', '?')} cores",
        fontsize=11,
    )
    missing = none_completed(report)
    if missing:
        fig.text(
            0.5,
            0.005,
            "completed no plan at all (not drawn): " + "; ".join(missing),
            ha="center",
            fontsize=8,
            color="0.35",
        )
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(out, dpi=110)


def main(argv: list[str]) -> int:
    report = json.loads(Path(argv[0]).read_text())
    draw(report, Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
