"""Gridlane's policy against real peers on the shared openb trace, side by side in one run: Kueue's BestEffortFIFO
with cohort borrowing and reclaimWithinCohort, and Slurm's multifactor priority with fair-share decay and
backfill (scheduler/peers.py, each written from its documentation).

The pool and team split are the simulator's: one pool, 4 teams by crc32(name) % 4, half the pool reserved in
equal shares, the queue preemptible, cycles at most once a minute, as in bench_scheduler's trace run.
Per policy: mean and p95 wait, reservation violations (per cycle, a team with pending work that fits within
its unused reservation and was not admitted: `peers.reservation_violations`, the same count for all three;
the simulator's own count, of each team's oldest task only, beside it), utilisation (GPU-hours used / GPU-hours
available over the trace), and Gridlane's mean wait over the better peer's (goal <= 0.8x, with 0 violations
and utilisation no lower).

GRIDLANE_BENCH_PEERS_GPUS (default "48,40") picks the pool sizes; GRIDLANE_BENCH_TASKS keeps only the first
N tasks of the trace (a shorter run).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from scheduler.model import Decisions, Snapshot
from scheduler.peers import PEERS, Policy, reservation_violations
from scheduler.simulate import policy_named, read_trace, report, simulate

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "traces" / "openb_pod_list_default.csv"
GROUPS = 4
GOAL = 0.8


class Counted:
    """A policy with the reservation violations of its decisions counted, cycle by cycle."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.violations = 0

    def __call__(self, snapshot: Snapshot) -> Decisions:
        decisions = self.policy(snapshot)
        self.violations += reservation_violations(snapshot, decisions)
        return decisions


def run() -> dict[str, Any]:
    path = os.environ.get("GRIDLANE_TRACE", str(TRACE))
    if not Path(path).exists():
        print(f"peers: {path} not found; set GRIDLANE_TRACE to an openb pod-list CSV")
        return {"skipped": path}
    limit = int(os.environ["GRIDLANE_BENCH_TASKS"]) if os.environ.get("GRIDLANE_BENCH_TASKS") else None
    tasks = read_trace(path, groups=GROUPS, limit=limit)
    results: dict[str, Any] = {}
    for gpus in (int(g) for g in os.environ.get("GRIDLANE_BENCH_PEERS_GPUS", "48,40").split(",")):
        rows: dict[str, dict[str, Any]] = {}
        for name in ("gridlane", *PEERS):
            counted = Counted(policy_named(name))
            started = time.process_time()
            outcome = simulate(tasks, policy=counted, groups=GROUPS, gpus=gpus, cycle_seconds=60)
            row = report(outcome, gpus)["overall"]
            row["violations"] = counted.violations
            row["cpu_s"] = round(time.process_time() - started, 1)
            rows[name] = row
        better = min(PEERS, key=lambda p: rows[p]["mean_wait_s"])
        ours = rows["gridlane"]
        ratio = ours["mean_wait_s"] / max(rows[better]["mean_wait_s"], 1e-9)
        met = ratio <= GOAL and ours["violations"] == 0 and ours["utilisation"] >= rows[better]["utilisation"]
        print(f"trace, {len(tasks)} tasks on {gpus} GPUs, {GROUPS} teams each reserving {gpus // 8}:")
        for name, row in rows.items():
            print(
                f"  {name:8} mean wait {row['mean_wait_s']:>9.1f} s  p95 {row['p95_wait_s']:>9.1f} s  "
                f"violations {row['violations']:>4} (oldest-task count {row['reservation_violations']})  "
                f"utilisation {row['utilisation']:.2%}  preemptions {row['preemptions']:>4}  ({row['cpu_s']} s CPU)"
            )
        print(
            f"  gridlane / {better} (the better peer) mean wait = {ratio:.2f}x (goal <= {GOAL}x, 0 violations, "
            f"utilisation no lower): {'met' if met else 'NOT met'}"
        )
        results[f"{gpus}_gpus"] = {**rows, "better_peer": better, "mean_wait_ratio": round(ratio, 3), "goal_met": met}
    return results
