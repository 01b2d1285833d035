"""Gridlane's policy against real peers on every openb trace list in ../shared/traces, side by side in one run:
Kueue's BestEffortFIFO with cohort borrowing and reclaimWithinCohort, and Slurm's multifactor priority with
fair-share decay and backfill (scheduler/peers.py, each written from its documentation).

Every `openb_pod_list_*.csv` in the traces folder is run (found there, not listed here), so a new family of load
is judged as soon as it is added. The pool and team split are the simulator's: one pool, 4 teams by crc32(name) %
4, half the pool reserved in equal shares, the queue preemptible, cycles at most once a minute. A list without
arrival and run times (the trace program's multigpu lists, made for packing) is named as not replayed and left out
of the verdict. A list whose tasks name GPU models (`gpu_spec`) replays on the pool split by model in proportion
to the node list's GPUs (openb_node_list_gpu_node.csv beside it; scheduler.simulate.pool_models), and its typed
tasks run only on their models, under all three policies.

Per list and pool size, per policy: mean wait, reservation violations (per cycle, a team with pending work that
fits within its unused reservation and was not admitted: `peers.reservation_violations`, the same count for
all three) and utilisation (GPU-hours used / GPU-hours available over the trace). The goal on each row:
Gridlane's mean wait <= 0.8x the better peer's where that wait exceeds ten minutes, and no more than the better
peer's elsewhere; 0 violations; utilisation no more than 2 points below the better peer's. The verdict at the
end is met only when every row meets it.

Pool sizes: each list runs at GRIDLANE_BENCH_PEERS_GPUS (default "48,40"). A list that no pool of those
contends (the better peer's mean wait is ten minutes or less at every one of them: the GPU-sharing lists, whose
fractional work packs densely) would be judged only where every policy starts nearly everything at once, so it
runs again at the tighter sizes of GRIDLANE_BENCH_PEERS_TIGHT (default "32,24"), in that order, until one of
them contends it (the better peer's mean wait exceeds ten minutes there): each list is judged under load at
least once where those sizes reach it, and the tighter rows count in the verdict like the others.

GRIDLANE_TRACES (default ../shared/traces) picks the folder; GRIDLANE_BENCH_PEERS_LISTS (e.g.
"gpushare80,default") keeps only those lists; GRIDLANE_BENCH_PEERS_TIGHT="" runs no tighter size;
GRIDLANE_BENCH_TASKS keeps only the first N tasks of each list (a shorter run).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from scheduler.model import Decisions, Snapshot
from scheduler.peers import PEERS, Policy, reservation_violations
from scheduler.simulate import (
    TIMES,
    Task,
    models_for,
    nodes_beside,
    policy_named,
    read_trace,
    replayable,
    report,
    simulate,
)

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT.parent / "shared" / "traces"
PREFIX = "openb_pod_list_"
GROUPS = 4
GOAL = 0.8  # where the better peer's mean wait exceeds LONG_WAIT_S
LONG_WAIT_S = 600.0
UTILISATION_SLACK = 0.02


class Counted:
    """A policy with the reservation violations of its decisions counted, cycle by cycle."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.violations = 0

    def __call__(self, snapshot: Snapshot) -> Decisions:
        decisions = self.policy(snapshot)
        self.violations += reservation_violations(snapshot, decisions)
        return decisions


def trace_lists(folder: Path, only: str = "") -> list[Path]:
    """Every openb pod list in the folder, by name; `only` ("a,b"): just those lists (by the name after the
    prefix)."""
    found = sorted(p for p in folder.glob(f"{PREFIX}*.csv") if p.is_file())
    wanted = {w.strip() for w in only.split(",") if w.strip()}
    return [p for p in found if not wanted or list_name(p) in wanted]


def list_name(path: Path) -> str:
    return path.stem[len(PREFIX) :]


def judge(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The row's verdict: the better peer, the ratio of mean waits, the goal that applies, and whether it is met."""
    better = min(PEERS, key=lambda p: rows[p]["mean_wait_s"])
    ours, theirs = rows["gridlane"], rows[better]
    goal = GOAL if theirs["mean_wait_s"] > LONG_WAIT_S else 1.0
    ratio = ours["mean_wait_s"] / theirs["mean_wait_s"] if theirs["mean_wait_s"] > 0 else 1.0
    met = (
        ours["mean_wait_s"] <= goal * theirs["mean_wait_s"]
        and ours["violations"] == 0
        and ours["utilisation"] >= theirs["utilisation"] - UTILISATION_SLACK
    )
    return {"better_peer": better, "mean_wait_ratio": round(ratio, 3), "goal": goal, "goal_met": met}


def run_list(tasks: list[Task], gpus: int, models: dict[str, int] | None) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for name in ("gridlane", *PEERS):
        counted = Counted(policy_named(name))
        started = time.process_time()
        outcome = simulate(tasks, policy=counted, groups=GROUPS, gpus=gpus, cycle_seconds=60, models=models)
        row = report(outcome, gpus)["overall"]
        row["violations"] = counted.violations
        row["cpu_s"] = round(time.process_time() - started, 1)
        rows[name] = row
    return {**rows, **judge(rows)}


def _line(name: str, gpus: int, r: dict[str, Any]) -> str:
    g, k, s = r["gridlane"], r["kueue"], r["slurm"]
    return (
        f"  {name:11} {gpus:>4} {g['mean_wait_s']:>10.1f} {k['mean_wait_s']:>10.1f} {s['mean_wait_s']:>10.1f}  "
        f"{r['better_peer']:6} {r['mean_wait_ratio']:>5.2f}x <={r['goal']:.1f}x  "
        f"{g['violations']:>3}/{k['violations']:>3}/{s['violations']:>4}  "
        f"{g['utilisation']:>6.2%}/{k['utilisation']:>6.2%}/{s['utilisation']:>6.2%}  "
        f"{g['never_started']:>3}  {'met' if r['goal_met'] else 'NOT met'}"
    )


def sizes(text: str) -> list[int]:
    """Pool sizes from "48,40" (blanks skipped)."""
    return [int(g) for g in text.split(",") if g.strip()]


def run() -> dict[str, Any]:
    folder = Path(os.environ.get("GRIDLANE_TRACES", str(TRACES)))
    lists = trace_lists(folder, os.environ.get("GRIDLANE_BENCH_PEERS_LISTS", ""))
    if not lists:
        print(f"peers: no {PREFIX}*.csv in {folder}; set GRIDLANE_TRACES to a folder of openb pod lists")
        return {"skipped": str(folder)}
    limit = int(os.environ["GRIDLANE_BENCH_TASKS"]) if os.environ.get("GRIDLANE_BENCH_TASKS") else None
    pools = sizes(os.environ.get("GRIDLANE_BENCH_PEERS_GPUS", "48,40"))
    tight = sizes(os.environ.get("GRIDLANE_BENCH_PEERS_TIGHT", "32,24"))
    print(f"{len(lists)} trace lists in {folder}, {GROUPS} teams each reserving 1/{2 * GROUPS} of the pool:")
    print(
        "  list        GPUs  gridlane_s    kueue_s    slurm_s  better ratio  goal   violations g/k/s   "
        "utilisation g/k/s      never  verdict"
    )
    results: dict[str, Any] = {}
    unreplayable = [list_name(p) for p in lists if not replayable(str(p))]
    for path in lists:
        if list_name(path) in unreplayable:
            print(f"  {list_name(path):11} not replayed: no {', '.join(TIMES)} (a list of tasks, not of arrivals)")
            continue
        tasks = read_trace(str(path), groups=GROUPS, limit=limit)
        contended = False
        for gpus in [*pools, *(g for g in tight if g not in pools)]:
            if contended and gpus not in pools:
                break  # under load at some size already: no tighter one is needed
            models = models_for(tasks, nodes_beside(str(path)), gpus)
            row = run_list(tasks, gpus, models)
            row["tasks"], row["gpu_models"] = len(tasks), models
            contended = contended or row["goal"] == GOAL
            results[f"{list_name(path)}@{gpus}"] = row
            print(_line(list_name(path), gpus, row), flush=True)
    typed = {k: r["gpu_models"] for k, r in results.items() if r["gpu_models"]}
    for key, models in typed.items():
        print(f"  {key}: pool by GPU model {models}")
    met = all(r["goal_met"] for r in results.values())
    cpu = sum(r[p]["cpu_s"] for r in results.values() for p in ("gridlane", *PEERS))
    print(
        f"verdict: {'met' if met else 'NOT met'} on {sum(r['goal_met'] for r in results.values())}/{len(results)} "
        f"rows (gridlane <= {GOAL}x the better peer's mean wait where it exceeds {LONG_WAIT_S / 60:.0f} min, "
        f"<= 1.0x elsewhere, 0 violations, utilisation within {UTILISATION_SLACK:.0%} points); {cpu:.0f} s CPU"
        + (f"; not judged, having no times: {', '.join(unreplayable)}" if unreplayable else "")
    )
    return {"rows": results, "goal_met": met, "not_replayed": unreplayable}
