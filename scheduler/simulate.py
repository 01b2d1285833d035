"""Replay a workload trace through the same decide() under a virtual clock: the benchmark, and a "what if".

    python -m scheduler.simulate --trace PATH --policy fifo|gridlane|kueue|slurm [--groups N] [--gpus G] [--json]

PATH is a CSV in the format of the Alibaba openb trace (cluster-trace-gpu-v2023): name, num_gpu, gpu_milli,
creation_time, scheduled_time, deletion_time, ... A task arrives at creation_time and runs for
deletion_time - scheduled_time; tasks the trace never scheduled (deleted while pending) are left out.
The trace has no teams: a task belongs to group crc32(name) % N, so the split is the same on every run.

The pool is one fabric of G GPUs (GPUs only: the trace's CPU and memory requests are not simulated).
Each group reserves (reserve_fraction * G / N) GPUs, and the queue allows preemption, so that a
reservation is a floor. Each cycle's snapshot carries the groups' decayed GPU use and their allocations, as
the worker's does (a half-life of FAIR_SHARE_HALF_LIFE_S, the worker's default), so fair share acts here too.
Users ask for a runtime limit of 1.5x what their task really takes (at least a minute): backfill plans with
the limit, tasks end at their real runtime. A preempted task starts over.

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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from fabrics.base import Resources
from scheduler.decide import decide
from scheduler.ledger import need_on
from scheduler.model import Decisions, FabricState, Job, QueueState, Quota, Snapshot, Weights
from scheduler.peers import PEERS, Policy, named
from scheduler.priority import DecayedUse, allocations

EPOCH = datetime(2023, 1, 1, tzinfo=UTC)
POOL = 1
QUEUE = 1
BIG = 10**12  # CPUs and memory are not simulated
FAIR_SHARE_HALF_LIFE_S = 24 * 3600.0  # GRIDLANE_FAIR_SHARE_HALF_LIFE_HOURS' default


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


@dataclass(frozen=True, slots=True)
class Item:
    """One piece of work the clock lets in: the job as it waits (no fabric, no start), when it arrives (seconds
    from the clock's start), how long it runs once started (None: until it leaves, or the clock stops), and when
    it is withdrawn if it still waits then (cancelled; None: never)."""

    job: Job
    arrival: float
    runtime: float | None
    leaves: float | None = None


class Observer:
    """What a run of the clock reports as it goes; each hook does nothing unless overridden."""

    def started(self, item: Item, now: float) -> None:
        """Admitted at `now` (the replay starts work the moment it is admitted)."""

    def stopped(self, item: Item, started: float, now: float, preempted: bool) -> None:
        """Its run that began at `started` ended at `now`: done, or preempted (then it waits again)."""

    def withdrawn(self, item: Item, now: float) -> None:
        """Left the line without ever starting (cancelled while it waited)."""

    def cycled(self, clock: Clock, snapshot: Snapshot, decisions: Decisions) -> None:
        """One cycle was decided and applied."""


SnapshotOf = Callable[[datetime, tuple[Job, ...], tuple[Job, ...]], Snapshot]


class Clock:
    """The virtual clock both the simulator and the what-if replay run on: cycles on arrivals, completions and
    withdrawals, at most one per cycle_seconds; each cycle decides on a snapshot and applies the decisions at
    once (admitted work starts, preempted work waits again and will start over). With `until`, the clock stops
    there, leaving what still runs or waits in `running` and `pending`.

    `rounds_at`: as the worker does, a cycle that admits at least this many goes again at once (at most
    `max_rounds` times), since the snapshot held only a slice of the line."""

    def __init__(self, items: list[Item], epoch: datetime, decide_fn: Callable[[Snapshot], Decisions],
                 snapshot_of: SnapshotOf, observer: Observer, *, cycle_seconds: float = 10.0,
                 until: float | None = None, rounds_at: int = 0, max_rounds: int = 20) -> None:  # fmt: skip
        self.items = sorted(items, key=lambda it: (it.arrival, it.job.id))
        self.by_id = {it.job.id: it for it in self.items}
        self.epoch = epoch
        self.decide_fn = decide_fn
        self.snapshot_of = snapshot_of
        self.observer = observer
        self.cycle_seconds = cycle_seconds
        self.until = until
        self.rounds_at = rounds_at
        self.max_rounds = max_rounds
        self.pending: dict[str, Job] = {}
        self.running: dict[str, tuple[Job, float, float]] = {}  # id -> (job, its start, its end)
        self.now = 0.0
        self.cycles = 0

    def run(self) -> float:
        """Run until nothing is left that could happen (or `until`); the time of the last cycle."""
        items, observer = self.items, self.observer
        pending, running = self.pending, self.running
        ends: list[tuple[float, str]] = []
        leaves: list[tuple[float, str]] = []
        i, last_cycle, now = 0, -math.inf, 0.0
        while i < len(items) or pending or running:
            # 1. Advance the clock to the next event, no sooner than a cycle after the last one.
            upcoming = [items[i].arrival] if i < len(items) else []
            upcoming += [ends[0][0]] if ends else []
            while leaves and leaves[0][1] not in pending:
                heapq.heappop(leaves)  # started (or already gone): nothing to withdraw
            upcoming += [leaves[0][0]] if leaves else []
            if not upcoming:
                break  # work is pending that can never start (larger than the pool)
            at = max(min(upcoming), last_cycle + self.cycle_seconds)
            if self.until is not None and at > self.until:
                break
            now = self.now = at
            # 2. Finish what ended, withdraw what was cancelled while it waited, and let in what arrived.
            while ends and ends[0][0] <= now:
                end, name = heapq.heappop(ends)
                if name in running and running[name][2] == end:
                    _, started, _ = running.pop(name)
                    observer.stopped(self.by_id[name], started, end, False)
            while leaves and leaves[0][0] <= now:
                when, name = heapq.heappop(leaves)
                if pending.pop(name, None) is not None:
                    observer.withdrawn(self.by_id[name], when)
            while i < len(items) and items[i].arrival <= now:
                item = items[i]
                pending[item.job.id] = item.job
                if item.leaves is not None:
                    heapq.heappush(leaves, (item.leaves, item.job.id))
                i += 1
            # 3. One cycle (or a few rounds of one): decide on a snapshot, then apply it.
            clock = self.epoch + timedelta(seconds=now)
            for _ in range(max(1, self.max_rounds)):
                snapshot = self.snapshot_of(clock, tuple(pending.values()), tuple(j for j, _, _ in running.values()))
                decisions = self.decide_fn(snapshot)
                self.cycles += 1
                self._apply(decisions, now, clock, ends)
                observer.cycled(self, snapshot, decisions)
                if not self.rounds_at or len(decisions.admit) < self.rounds_at:
                    break
            last_cycle = now
        return now

    def _apply(self, decisions: Decisions, now: float, clock: datetime, ends: list[tuple[float, str]]) -> None:
        pending, running, observer = self.pending, self.running, self.observer
        for p in decisions.preempt:
            _, started, _ = running.pop(p.job_id)
            item = self.by_id[p.job_id]
            observer.stopped(item, started, now, True)
            pending[p.job_id] = item.job  # it starts over, keeping its place by submission time
        for admit in decisions.admit:
            job = pending.pop(admit.job_id)
            item = self.by_id[admit.job_id]
            if item.runtime is not None:
                end = now + item.runtime
            else:  # never ran for real: it holds what it asked for until it was cancelled, or the clock stops
                end = item.leaves if item.leaves is not None else (self.until if self.until is not None else now)
                end = max(end, now)
            running[job.id] = (replace(job, fabric_id=admit.fabric_id, started_at=clock), now, end)
            heapq.heappush(ends, (end, job.id))
            observer.started(item, now)


class Both(Observer):
    """Two observers, told in turn."""

    def __init__(self, first: Observer, second: Observer) -> None:
        self.first, self.second = first, second

    def started(self, item: Item, now: float) -> None:
        self.first.started(item, now)
        self.second.started(item, now)

    def stopped(self, item: Item, started: float, now: float, preempted: bool) -> None:
        self.first.stopped(item, started, now, preempted)
        self.second.stopped(item, started, now, preempted)

    def withdrawn(self, item: Item, now: float) -> None:
        self.first.withdrawn(item, now)
        self.second.withdrawn(item, now)

    def cycled(self, clock: Clock, snapshot: Snapshot, decisions: Decisions) -> None:
        self.first.cycled(clock, snapshot, decisions)
        self.second.cycled(clock, snapshot, decisions)


class _Measure(Observer):
    """The simulator's figures: waits, useful and wasted GPU-seconds, violations, preemptions."""

    def __init__(self, groups: int, capacity: int, reserved: int) -> None:
        self.out = Outcome(waits={g: {} for g in range(groups)})
        self.capacity = capacity
        self.reserved = reserved

    def started(self, item: Item, now: float) -> None:
        job = item.job
        if not need_on(job, True)[0] <= self.capacity:
            self.out.gang_violations += 1
        self.out.waits[job.group_id][job.id] = now - item.arrival

    def stopped(self, item: Item, started: float, now: float, preempted: bool) -> None:
        gpus = item.job.total.gpus_milli / 1000
        if preempted:
            self.out.wasted_gpu_seconds += gpus * (now - started)
            self.out.preemptions += 1
        else:
            self.out.useful_gpu_seconds += gpus * (item.runtime or 0.0)
            self.out.makespan = max(self.out.makespan, now)

    def cycled(self, clock: Clock, snapshot: Snapshot, decisions: Decisions) -> None:
        self.out.reservation_violations += _violations(snapshot, decisions, self.reserved, clock.pending)
        if sum(j.total.gpus_milli for j, _, _ in clock.running.values()) > self.capacity:
            raise AssertionError(f"over capacity at t={clock.now}")


def policy_named(name: str) -> Policy:
    """A fresh policy by name (a peer may keep state from one cycle to the next, as its daemon does)."""
    return fifo if name == "fifo" else decide if name == "gridlane" else named(name)


def simulate(tasks: list[Task], *, policy: str | Policy, groups: int, gpus: int, reserve_fraction: float = 0.5,
             cycle_seconds: float = 10.0, limit_of: Callable[[Task], int] | None = None,
             watch: Observer | None = None,
             learned: Callable[[datetime], Mapping[Any, int]] | None = None) -> Outcome:  # fmt: skip
    """`limit_of`: each task's runtime limit (runtime_limit unless given); `watch`: told what happens too, after
    the simulator's own measure; `learned`: the learned runtimes each cycle's snapshot carries, at its time
    (Snapshot.expected_runtimes: they change estimates only; scheduler.calibrate)."""
    limit_of = limit_of or runtime_limit
    decide_fn = policy_named(policy) if isinstance(policy, str) else policy
    capacity = gpus * 1000
    fabrics = {POOL: FabricState(POOL, "pool", Resources(capacity, BIG, BIG))}
    queues = {QUEUE: QueueState(QUEUE, "trace", (POOL,), preemptible=True)}
    reserved = int(capacity * reserve_fraction / groups) // 1000 * 1000
    quotas: dict[tuple[int, int | None], Quota] = {
        (g, POOL): Quota(g, POOL, reservation=Resources(reserved, 0, 0)) for g in range(groups)
    }
    items = [
        Item(Job(t.name, t.group, QUEUE, Resources(t.gpus_milli, 0, 0),
                 submitted_at=EPOCH + timedelta(seconds=t.arrival), runtime_limit_s=limit_of(t)),
             t.arrival, t.runtime)
        for t in tasks
    ]  # fmt: skip

    shares = allocations(quotas, fabrics, dict.fromkeys(range(groups), 1))
    use = DecayedUse(FAIR_SHARE_HALF_LIFE_S)

    def snapshot_of(now: datetime, pending: tuple[Job, ...], running: tuple[Job, ...]) -> Snapshot:
        return Snapshot(now=now, fabrics=fabrics, queues=queues, pending=pending, running=running, quotas=quotas,
                        usage=use.at(now, running), shares=shares, weights=Weights(),
                        expected_runtimes=learned(now) if learned is not None else {})  # fmt: skip

    measure = _Measure(groups, capacity, reserved)
    observer: Observer = measure if watch is None else Both(measure, watch)
    clock = Clock(items, EPOCH, decide_fn, snapshot_of, observer, cycle_seconds=cycle_seconds)
    last = clock.run()
    measure.out.cycles = clock.cycles
    measure.out.makespan = max(measure.out.makespan, last)
    return measure.out


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
