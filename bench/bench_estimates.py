"""How good estimated starts are on the shared openb trace, side by side in one run: estimates from runtime limits
against estimates from learned runtimes (scheduler/calibrate.py), on the same replay (the same decisions: learned
runtimes change estimates only; the run checks that every task started at the same time in both).

The trace has no runtime limits: each task's limit is its runtime rounded up to the next tier a user would pick
(1 h, 4 h, 24 h, 7 d, 30 d; calibrate.tier_limit). The pool and team split are the simulator's (4 teams by
crc32(name) % 4, half the pool reserved), on GRIDLANE_BENCH_ESTIMATES_GPUS GPUs (default 40), cycles at most once
a minute. The error of an estimate is the actual start minus the last estimate shown before it (as the portal
keeps it); the first estimate's error is printed beside it.

Goals: the median absolute error with learned runtimes <= 0.5x that with limits, and >= 85 % of actual starts
inside the band (the central 90 % of the last 7 days' errors) put around their last estimate.
GRIDLANE_BENCH_TASKS keeps only the first N tasks of the trace (a shorter run).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from scheduler.calibrate import replay, summary
from scheduler.simulate import read_trace

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "traces" / "openb_pod_list_default.csv"
GROUPS = 4
RATIO_GOAL = 0.5
COVERAGE_GOAL = 0.85


def run() -> dict[str, Any]:
    path = os.environ.get("GRIDLANE_TRACE", str(TRACE))
    if not Path(path).exists():
        print(f"estimates: {path} not found; set GRIDLANE_TRACE to an openb pod-list CSV")
        return {"skipped": path}
    limit = int(os.environ["GRIDLANE_BENCH_TASKS"]) if os.environ.get("GRIDLANE_BENCH_TASKS") else None
    gpus = int(os.environ.get("GRIDLANE_BENCH_ESTIMATES_GPUS", "40"))
    tasks = read_trace(path, groups=GROUPS, limit=limit)
    rows: dict[str, dict[str, Any]] = {}
    starts = {}
    for name, learned in (("limits", False), ("learned", True)):
        began = time.process_time()
        out = replay(tasks, learned=learned, groups=GROUPS, gpus=gpus, cycle_seconds=60)
        rows[name] = {**summary(out), "cpu_s": round(time.process_time() - began, 1)}
        starts[name] = out.starts
    same = starts["limits"] == starts["learned"]
    ours, theirs = rows["learned"], rows["limits"]
    ratio = ours["median_abs_error_s"] / max(theirs["median_abs_error_s"], 1e-9)
    first_ratio = ours["first_median_abs_error_s"] / max(theirs["first_median_abs_error_s"], 1e-9)
    coverage = ours["band_coverage"] or 0.0
    met = same and ratio <= RATIO_GOAL and coverage >= COVERAGE_GOAL
    print(f"trace, {len(tasks)} tasks on {gpus} GPUs, {GROUPS} teams; limits: the runtime rounded up to a tier")
    for name, row in rows.items():
        print(
            f"  {name:8} {row['estimated_starts']:>5} estimated starts  median |error| "
            f"{row['median_abs_error_s']:>8.0f} s  p90 {row['p90_abs_error_s']:>8.0f} s  (first estimate: median "
            f"{row['first_median_abs_error_s']:>8.0f} s)  band coverage {row['band_coverage']:.1%} of "
            f"{row['banded']}  ({row['cpu_s']} s CPU)"
        )
    print(
        f"  learned / limits median |error| = {ratio:.2f}x (goal <= {RATIO_GOAL}x; first estimate {first_ratio:.2f}x), "
        f"band coverage {coverage:.1%} (goal >= {COVERAGE_GOAL:.0%}), same starts in both: {same}: "
        f"{'met' if met else 'NOT met'}"
    )
    return {
        **rows,
        "gpus": gpus,
        "tasks": len(tasks),
        "median_error_ratio": round(ratio, 3),
        "first_median_error_ratio": round(first_ratio, 3),
        "band_coverage": coverage,
        "same_starts": same,
        "goal_met": met,
    }
