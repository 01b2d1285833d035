"""Replay a workload trace through the same decide() under a virtual clock: the benchmark, and a "what if".

    python -m scheduler.simulate --trace PATH --policy fifo|gridlane|kueue|slurm [--groups N] [--gpus G] [--json]

PATH is a CSV in the format of the Alibaba openb trace (cluster-trace-gpu-v2023): name, num_gpu, gpu_milli,
creation_time, scheduled_time, deletion_time, ... A task arrives at creation_time and runs for
deletion_time - scheduled_time; tasks the trace never scheduled (deleted while pending) are left out.
The trace has no teams: a task belongs to group crc32(name) % N, so the split is the same on every run.

The pool is one fabric of G GPUs (GPUs only: the trace's CPU and memory requests are not simulated).
Each group reserves (reserve_fraction * G / N) GPUs, and the queue allows preemption, so that a
reservation is a floor. Users ask for a runtime limit of 1.5x what their task really takes (at least a
minute): backfill plans with the limit, tasks end at their real runtime. A preempted task starts over.

Policies: `fifo` starts tasks strictly in arrival order and stops at the first that does not fit;
`gridlane` is decide() itself; `kueue` and `slurm` are those schedulers' policies, written from their
documentation (scheduler/peers.py). Cycles run on arrivals and completions, at most one per --cycle-seconds.
"""

from __future__ import annotations

import argparse
import csv
import heapq
import json
import math
import sys
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from fabrics.base import Resources
from scheduler.decide import decide
from scheduler.ledger import need_on
from scheduler.model import Decisions, FabricState, Job, QueueState, Quota, Snapshot, Weights
from scheduler.peers import PEERS, Policy, named

EPOCH = datetime(2023, 1, 1, tzinfo=UTC)
POOL = 1
QUEUE = 1
BIG = 10**12  # CPUs and memory are not simulated


@dataclass(frozen=True)
class Task:
    name: str
    arrival: float  # seconds since the trace's start
    runtime: float
    gpus_milli: int
    group: int


@dataclass
class Outcome:
    waits: dict[int, dict[str, float]] = field(default_factory=dict)  # group -> task -> wait for its last start
    useful_gpu_seconds: float = 0.0
    wasted_gpu_seconds: float = 0.0
    reservation_violations: int = 0
    gang_violations: int = 0
    preemptions: int = 0
    makespan: float = 0.0
    cycles: int = 0


def read_trace(path: str, groups: int, time_scale: float = 1.0, limit: int | None = None) -> list[Task]:
    tasks = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if not row.get("scheduled_time") or not row.get("deletion_time"):
                continue  # deleted before it ever ran
            runtime = float(row["deletion_time"]) - float(row["scheduled_time"])
            if runtime <= 0:
                continue
            gpus = int(row["num_gpu"] or 0) * int(row["gpu_milli"] or 0)
            group = zlib.crc32(row["name"].encode()) % groups
            tasks.append(Task(row["name"], float(row["creation_time"]) / time_scale, runtime, gpus, group))
            if limit is not None and len(tasks) >= limit:
                break
    tasks.sort(key=lambda t: (t.arrival, t.name))
    if tasks:
        start = tasks[0].arrival
        tasks = [Task(t.name, t.arrival - start, t.runtime, t.gpus_milli, t.group) for t in tasks]
    return tasks


def runtime_limit(task: Task) -> int:
    return max(60, math.ceil(task.runtime * 1.5))


def fifo(snapshot: Snapshot) -> Decisions:
    """Strict arrival order: start tasks until the first one that does not fit, then stop."""
    from scheduler.model import Admit, Waiting
    from scheduler.reasons import Reason

    free = snapshot.fabrics[POOL].capacity.gpus_milli - sum(j.total.gpus_milli for j in snapshot.running)
    admit, waiting = [], []
    blocked = False
    for job in sorted(snapshot.pending, key=lambda j: (j.submitted_at or EPOCH, j.id)):
        if not blocked and job.total.gpus_milli <= free:
            free -= job.total.gpus_milli
            admit.append(Admit(job.id, POOL))
        else:
            blocked = True
            waiting.append(Waiting(job.id, Reason("fifo", "behind the head of the line")))
    return Decisions(admit=tuple(admit), waiting=tuple(waiting))


def policy_named(name: str) -> Policy:
    """A fresh policy by name (a peer may keep state from one cycle to the next, as its daemon does)."""
    return fifo if name == "fifo" else decide if name == "gridlane" else named(name)


def simulate(tasks: list[Task], *, policy: str | Policy, groups: int, gpus: int, reserve_fraction: float = 0.5,
             cycle_seconds: float = 10.0) -> Outcome:  # fmt: skip
    decide_fn = policy_named(policy) if isinstance(policy, str) else policy
    capacity = gpus * 1000
    fabrics = {POOL: FabricState(POOL, "pool", Resources(capacity, BIG, BIG))}
    queues = {QUEUE: QueueState(QUEUE, "trace", (POOL,), preemptible=True)}
    reserved = int(capacity * reserve_fraction / groups) // 1000 * 1000
    quotas: dict[tuple[int, int | None], Quota] = {
        (g, POOL): Quota(g, POOL, reservation=Resources(reserved, 0, 0)) for g in range(groups)
    }
    by_name = {t.name: t for t in tasks}
    out = Outcome(waits={g: {} for g in range(groups)})
    pending: dict[str, Job] = {}
    running: dict[str, tuple[Job, float]] = {}  # name -> (job, its real end)
    ends: list[tuple[float, str]] = []
    i, now, last_cycle = 0, 0.0, -math.inf
    usage_seconds = 0.0

    while i < len(tasks) or pending or running:
        # 1. Advance the clock to the next event, no sooner than a cycle after the last one.
        upcoming = [tasks[i].arrival] if i < len(tasks) else []
        upcoming += [ends[0][0]] if ends else []
        if not upcoming:
            break  # work is pending that can never start (larger than the pool)
        now = max(min(upcoming), last_cycle + cycle_seconds)
        # 2. Finish what ended and let in what arrived.
        while ends and ends[0][0] <= now:
            end, name = heapq.heappop(ends)
            if name in running and running[name][1] == end:
                job, _ = running.pop(name)
                out.useful_gpu_seconds += job.total.gpus_milli / 1000 * by_name[name].runtime
                out.makespan = max(out.makespan, end)
        while i < len(tasks) and tasks[i].arrival <= now:
            t = tasks[i]
            arrived = EPOCH + timedelta(seconds=t.arrival)
            pending[t.name] = Job(t.name, t.group, QUEUE, Resources(t.gpus_milli, 0, 0), submitted_at=arrived,
                                  runtime_limit_s=runtime_limit(t))  # fmt: skip
            i += 1
        # 3. One cycle: decide on a snapshot, then apply it.
        clock = EPOCH + timedelta(seconds=now)
        snapshot = Snapshot(
            now=clock,
            fabrics=fabrics,
            queues=queues,
            pending=tuple(pending.values()),
            running=tuple(job for job, _ in running.values()),
            quotas=quotas,
            weights=Weights(),
        )
        decisions = decide_fn(snapshot)
        out.cycles += 1
        last_cycle = now
        for p in decisions.preempt:
            job, end = running.pop(p.job_id)
            started = (job.started_at or clock) - EPOCH
            out.wasted_gpu_seconds += job.total.gpus_milli / 1000 * (now - started.total_seconds())
            out.preemptions += 1
            pending[p.job_id] = Job(job.id, job.group_id, QUEUE, job.per_node, submitted_at=job.submitted_at,
                                    runtime_limit_s=job.runtime_limit_s)  # fmt: skip
        for admit in decisions.admit:
            job = pending.pop(admit.job_id)
            task = by_name[admit.job_id]
            if not need_on(job, True)[0] <= capacity:
                out.gang_violations += 1
            started_job = Job(job.id, job.group_id, QUEUE, job.per_node, submitted_at=job.submitted_at,
                              runtime_limit_s=job.runtime_limit_s, fabric_id=POOL, started_at=clock)  # fmt: skip
            running[job.id] = (started_job, now + task.runtime)
            heapq.heappush(ends, (now + task.runtime, job.id))
            out.waits[job.group_id][job.id] = now - task.arrival
        out.reservation_violations += _violations(snapshot, decisions, reserved, pending)
        usage_seconds = now
        if sum(j.total.gpus_milli for j, _ in running.values()) > capacity:
            raise AssertionError(f"over capacity at t={now}")
    out.makespan = max(out.makespan, usage_seconds)
    return out


def _violations(snapshot: Snapshot, decisions: Decisions, reserved: int, pending: dict[str, Job]) -> int:
    """Groups whose next task fits within their unused reservation but was not started in this cycle."""
    gone = {p.job_id for p in decisions.preempt}
    admitted = {a.job_id for a in decisions.admit}
    used: dict[int, int] = {}
    for job in snapshot.running:
        if job.id not in gone:
            used[job.group_id] = used.get(job.group_id, 0) + job.total.gpus_milli
    for job in snapshot.pending:
        if job.id in admitted:
            used[job.group_id] = used.get(job.group_id, 0) + job.total.gpus_milli
    first: dict[int, Job] = {}
    for job in sorted(pending.values(), key=lambda j: (j.submitted_at or EPOCH, j.id)):
        first.setdefault(job.group_id, job)
    return sum(1 for g, job in first.items() if job.total.gpus_milli <= reserved - used.get(g, 0))


def _p(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


def report(out: Outcome, gpus: int) -> dict[str, Any]:
    every = [w for ws in out.waits.values() for w in ws.values()]
    span = out.makespan or 1.0
    return {
        "overall": {
            "tasks": len(every),
            "mean_wait_s": round(sum(every) / max(1, len(every)), 1),
            "p95_wait_s": round(_p(every, 95), 1),
            "utilisation": round(out.useful_gpu_seconds / (gpus * span), 4),
            "wasted_by_preemption": round(out.wasted_gpu_seconds / (gpus * span), 4),
            "reservation_violations": out.reservation_violations,
            "gang_violations": out.gang_violations,
            "preemptions": out.preemptions,
            "cycles": out.cycles,
        },
        "groups": {str(g): _summary(list(ws.values())) for g, ws in sorted(out.waits.items())},
    }


def _summary(waits: list[float]) -> dict[str, float]:
    return {"tasks": len(waits), "mean_wait_s": round(sum(waits) / max(1, len(waits)), 1),
            "p95_wait_s": round(_p(waits, 95), 1)}  # fmt: skip


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m scheduler.simulate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", required=True, help="CSV in the openb pod-list format")
    parser.add_argument("--policy", choices=["fifo", "gridlane", *PEERS], default="gridlane")
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=32, help="GPUs in the simulated pool")
    parser.add_argument("--time-scale", type=float, default=1.0, help="divide arrival times by this (more load)")
    parser.add_argument("--reserve-fraction", type=float, default=0.5, help="share of the pool reserved in all")
    parser.add_argument("--cycle-seconds", type=float, default=10.0)
    parser.add_argument("--limit", type=int, default=None, help="only the first N tasks")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(list(argv) if argv is not None else None)
    tasks = read_trace(args.trace, args.groups, args.time_scale, args.limit)
    out = simulate(tasks, policy=args.policy, groups=args.groups, gpus=args.gpus,
                   reserve_fraction=args.reserve_fraction, cycle_seconds=args.cycle_seconds)  # fmt: skip
    result = {"policy": args.policy, "gpus": args.gpus, "groups": args.groups, **report(out, args.gpus)}
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        o = result["overall"]
        print(f"{args.policy}: {o['tasks']} tasks, mean wait {o['mean_wait_s']} s, p95 {o['p95_wait_s']} s, "
              f"utilisation {o['utilisation']}, reservation violations {o['reservation_violations']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
