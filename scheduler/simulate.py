"""Replay a workload trace through the same decide() under a virtual clock: the benchmark, and a "what if".

    python -m scheduler.simulate --trace PATH --policy fifo|gridlane|kueue|slurm [--groups N] [--gpus G] [--json]

PATH is a CSV in the format of the Alibaba openb trace (cluster-trace-gpu-v2023): name, num_gpu, gpu_milli,
creation_time, scheduled_time, deletion_time, ... A task arrives at creation_time and runs for
deletion_time - scheduled_time; tasks the trace never scheduled (deleted while pending) are left out.
The trace has no teams: a task belongs to group crc32(name) % N, so the split is the same on every run.

The pool is one fabric of G GPUs (GPUs only: the trace's CPU and memory requests are not simulated); a
fraction of a GPU (gpu_milli < 1000) takes that fraction of the pool's GPU capacity. Each group reserves
(reserve_fraction * G / N) GPUs, and the queue allows preemption, so that a reservation is a floor.
A list whose tasks name GPU models (`gpu_spec`, e.g. "T4" or "V100M16|V100M32": any of these) replays on a
pool split by model instead: one fabric per model, its GPUs the model's share of the cluster's in the node list
(`pool_models`), every model a target of the queue, largest first; a typed task may go only to its models'
fabrics (Job.only_on, which every policy honours: Kueue's flavors by node label, Slurm's --gres=gpu:<type>
partitions), an untyped one anywhere. Each group then reserves its share on every model's fabric, in
proportion to the fabric's size (in thousandths of a GPU, so that a small model keeps a floor too).
Each cycle's snapshot carries the groups' decayed GPU use and their allocations, as
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
import os
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
NODE_LIST = "openb_node_list_gpu_node.csv"
FAIR_SHARE_HALF_LIFE_S = 24 * 3600.0  # GRIDLANE_FAIR_SHARE_HALF_LIFE_HOURS' default


@dataclass(frozen=True)
class Task:
    name: str
    arrival: float  # seconds since the trace's start
    runtime: float
    gpus_milli: int
    group: int
    models: tuple[str, ...] = ()  # the GPU models it may run on (its gpu_spec); empty: any


def gpu_models(spec: str) -> tuple[str, ...]:
    """The models a gpu_spec accepts: "V100M16|V100M32" -> ("V100M16", "V100M32"); "" -> () (any)."""
    return tuple(sorted({m.strip() for m in spec.split("|") if m.strip()}))


def node_models(path: str) -> dict[str, int]:
    """GPUs per model in an openb node list (columns `gpu`, `model`); nodes without GPUs are left out."""
    totals: dict[str, int] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            gpus = int(row.get("gpu") or 0)
            if gpus > 0 and row.get("model"):
                totals[row["model"]] = totals.get(row["model"], 0) + gpus
    return totals


def pool_models(totals: dict[str, int], gpus: int) -> dict[str, int]:
    """A pool of `gpus` GPUs split by model in proportion to the cluster's (largest remainder), every model
    keeping at least one GPU (taken from the largest models where the floors overshoot)."""
    whole = sum(totals.values())
    if whole <= 0 or gpus < len(totals):
        raise ValueError(f"cannot split {gpus} GPUs over {len(totals)} GPU models")
    exact = {m: gpus * n / whole for m, n in totals.items()}
    out = {m: max(1, math.floor(x)) for m, x in exact.items()}
    by_remainder = sorted(exact, key=lambda m: (-(exact[m] - math.floor(exact[m])), m))
    for m in by_remainder[: max(0, gpus - sum(out.values()))]:
        out[m] += 1
    while sum(out.values()) > gpus:
        out[max(out, key=lambda m: (out[m], m))] -= 1
    return out


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
    never_started: int = 0  # larger than every fabric of its GPU models: it waits until the trace ends


def nodes_beside(trace: str) -> str:
    """The openb node list with GPU models that sits beside a pod list."""
    return os.path.join(os.path.dirname(os.path.abspath(trace)), NODE_LIST)


def models_for(tasks: list[Task], nodes: str, gpus: int) -> dict[str, int] | None:
    """The pool's GPUs per model when some task names a model (from the node list at `nodes`); else None (one
    pool, as a list without GPU-type constraints has always replayed)."""
    return pool_models(node_models(nodes), gpus) if any(t.models for t in tasks) else None


# What a pod list needs to be replayed: when each task arrived, started and ended (the openb program's multigpu
# lists, made for packing, have none of these).
TIMES = ("creation_time", "scheduled_time", "deletion_time")


def replayable(path: str) -> bool:
    """Whether the pod list's header has every one of TIMES."""
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    return all(column in header for column in TIMES)


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
            models = gpu_models(row.get("gpu_spec") or "") if gpus else ()
            tasks.append(Task(row["name"], float(row["creation_time"]) / time_scale, runtime, gpus, group, models))
            if limit is not None and len(tasks) >= limit:
                break
    tasks.sort(key=lambda t: (t.arrival, t.name))
    if tasks:
        start = tasks[0].arrival
        tasks = [replace(t, arrival=t.arrival - start) for t in tasks]
    return tasks


def runtime_limit(task: Task) -> int:
    return max(60, math.ceil(task.runtime * 1.5))


def fifo(snapshot: Snapshot) -> Decisions:
    """Strict arrival order: start tasks (each on the first of its fabrics with room) until the first one that
    does not fit, then stop."""
    from scheduler.model import Admit, Waiting
    from scheduler.reasons import Reason

    free = {fid: f.capacity.gpus_milli for fid, f in snapshot.fabrics.items()}
    for j in snapshot.running:
        free[j.fabric_id or POOL] -= j.total.gpus_milli
    admit, waiting = [], []
    blocked = False
    for job in sorted(snapshot.pending, key=lambda j: (j.submitted_at or EPOCH, j.id)):
        fid = next((f for f in job.only_on or free if job.total.gpus_milli <= free[f]), None)
        if not blocked and fid is not None:
            free[fid] -= job.total.gpus_milli
            admit.append(Admit(job.id, fid))
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

    def __init__(self, groups: int, fabrics: Mapping[int, FabricState], reserved: Mapping[int, int]) -> None:
        self.out = Outcome(waits={g: {} for g in range(groups)})
        self.sizes = {fid: f.capacity.gpus_milli for fid, f in fabrics.items()}
        self.capacity = sum(self.sizes.values())
        self.reserved = reserved
        self.started_once: set[str] = set()

    def started(self, item: Item, now: float) -> None:
        job = item.job
        if not need_on(job, True)[0] <= self.capacity:
            self.out.gang_violations += 1
        self.started_once.add(job.id)
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
        held: dict[int | None, int] = {}
        for job, _, _ in clock.running.values():
            if job.only_on is not None and job.fabric_id not in job.only_on:
                raise AssertionError(f"{job.id} runs on fabric {job.fabric_id}, not one of its GPU models")
            held[job.fabric_id] = held.get(job.fabric_id, 0) + job.total.gpus_milli
        if any(gpus > self.sizes.get(fid or 0, 0) for fid, gpus in held.items()):
            raise AssertionError(f"over capacity at t={clock.now}")


def policy_named(name: str) -> Policy:
    """A fresh policy by name (a peer may keep state from one cycle to the next, as its daemon does)."""
    return fifo if name == "fifo" else decide if name == "gridlane" else named(name)


def simulate(tasks: list[Task], *, policy: str | Policy, groups: int, gpus: int, reserve_fraction: float = 0.5,
             cycle_seconds: float = 10.0, models: Mapping[str, int] | None = None,
             limit_of: Callable[[Task], int] | None = None, watch: Observer | None = None,
             learned: Callable[[datetime], Mapping[Any, int]] | None = None) -> Outcome:  # fmt: skip
    """Replay the tasks on a pool of `gpus` GPUs: one fabric, or with `models` (GPUs per model, summing to
    `gpus`: `pool_models`) one fabric per model. Tasks that name models need `models` (else ValueError: their
    constraint would be dropped); a task larger than all its models' fabrics together never starts.

    `limit_of`: each task's runtime limit (runtime_limit unless given); `watch`: told what happens too, after
    the simulator's own measure; `learned`: the learned runtimes each cycle's snapshot carries, at its time
    (Snapshot.expected_runtimes: they change estimates only; scheduler.calibrate)."""
    limit_of = limit_of or runtime_limit
    decide_fn = policy_named(policy) if isinstance(policy, str) else policy
    capacity = gpus * 1000
    if models is None and any(t.models for t in tasks):
        raise ValueError("the tasks name GPU models (gpu_spec): give the pool's GPUs per model")
    sizes = sorted((models or {"pool": gpus}).items(), key=lambda kv: (-kv[1], kv[0]))
    fabrics = {POOL + i: FabricState(POOL + i, m, Resources(n * 1000, BIG, BIG)) for i, (m, n) in enumerate(sizes)}
    by_model = {f.name: fid for fid, f in fabrics.items()}
    queues = {QUEUE: QueueState(QUEUE, "trace", tuple(fabrics), preemptible=True)}
    if models is None:  # one pool: whole GPUs, as before
        reserved = {POOL: int(capacity * reserve_fraction / groups) // 1000 * 1000}
    else:  # each model's fabric its share, in thousandths
        reserved = {fid: int(f.capacity.gpus_milli * reserve_fraction / groups) for fid, f in fabrics.items()}
    quotas: dict[tuple[int, int | None], Quota] = {
        (g, fid): Quota(g, fid, reservation=Resources(r, 0, 0)) for g in range(groups) for fid, r in reserved.items()
    }
    items = [
        Item(Job(t.name, t.group, QUEUE, Resources(t.gpus_milli, 0, 0),
                 submitted_at=EPOCH + timedelta(seconds=t.arrival), runtime_limit_s=limit_of(t),
                 only_on=tuple(sorted(by_model[m] for m in t.models if m in by_model)) if t.models else None),
             t.arrival, t.runtime)
        for t in tasks
    ]  # fmt: skip

    shares = allocations(quotas, fabrics, dict.fromkeys(range(groups), 1))
    use = DecayedUse(FAIR_SHARE_HALF_LIFE_S)

    def snapshot_of(now: datetime, pending: tuple[Job, ...], running: tuple[Job, ...]) -> Snapshot:
        return Snapshot(now=now, fabrics=fabrics, queues=queues, pending=pending, running=running, quotas=quotas,
                        usage=use.at(now, running), shares=shares, weights=Weights(),
                        expected_runtimes=learned(now) if learned is not None else {})  # fmt: skip

    measure = _Measure(groups, fabrics, reserved)
    observer: Observer = measure if watch is None else Both(measure, watch)
    clock = Clock(items, EPOCH, decide_fn, snapshot_of, observer, cycle_seconds=cycle_seconds)
    last = clock.run()
    measure.out.cycles = clock.cycles
    measure.out.never_started = sum(1 for it in items if it.job.id not in measure.started_once)
    measure.out.makespan = max(measure.out.makespan, last)
    return measure.out


def _violations(snapshot: Snapshot, decisions: Decisions, reserved: Mapping[int, int], pending: dict[str, Job]) -> int:
    """Groups whose next task fits within their unused reservation on one of its fabrics but was not started
    in this cycle."""
    gone = {p.job_id for p in decisions.preempt}
    admitted = {a.job_id: a.fabric_id for a in decisions.admit}
    used: dict[tuple[int, int | None], int] = {}
    for job in snapshot.running:
        if job.id not in gone:
            key = (job.group_id, job.fabric_id)
            used[key] = used.get(key, 0) + job.total.gpus_milli
    for job in snapshot.pending:
        if job.id in admitted:
            key = (job.group_id, admitted[job.id])
            used[key] = used.get(key, 0) + job.total.gpus_milli
    first: dict[int, Job] = {}
    for job in sorted(pending.values(), key=lambda j: (j.submitted_at or EPOCH, j.id)):
        first.setdefault(job.group_id, job)
    return sum(
        1
        for g, job in first.items()
        if any(job.total.gpus_milli <= reserved[f] - used.get((g, f), 0) for f in job.only_on or reserved)
    )


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
            "never_started": out.never_started,
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
    parser.add_argument("--nodes", default=None, help="node list with GPU models (default: beside the trace)")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(list(argv) if argv is not None else None)
    tasks = read_trace(args.trace, args.groups, args.time_scale, args.limit)
    out = simulate(tasks, policy=args.policy, groups=args.groups, gpus=args.gpus,
                   reserve_fraction=args.reserve_fraction, cycle_seconds=args.cycle_seconds,
                   models=models_for(tasks, args.nodes or nodes_beside(args.trace), args.gpus))  # fmt: skip
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
