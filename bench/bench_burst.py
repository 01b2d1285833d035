"""Cloud burst, side by side in one run.

1. The openb trace (../shared/traces) on an on-premises pool too small for its peaks, under three policies:
   no burst; Gridlane's autoscaler (scheduler.burst.plan: work the scheduler expects to start on premises within
   BURST_AFTER is left to do so, the rest placed first on instances there or on their way, then packed onto the
   cheapest types, none launched for work shorter than a boot; idle instances ended after 10 minutes, or at once
   when on premises has room for all they could take or a cheaper type holds a GPU too; busy ones ended when
   their work is young and on premises has room for it twice over, the work going back in line to restart
   there, as agents.lose puts a preemptible queue's work back: the trace's queue is taken as preemptible, and
   the restarts and the run they lose are printed); and a naive policy that
   launches one instance per waiting workload and terminates it when that workload ends. Goal: Gridlane's p95
   wait within 1.2x the naive policy's, at no more than 0.6x its instance-hours. A task's wait runs from its
   arrival to the start of the run that finishes: a restarted task's lost run and second wait count as waiting.
   Where each burst policy's
   instance-hours go is printed beside: booting, booted with no task, the share of the instance's GPUs its tasks
   hold, and the share they leave empty (packing waste); and the GPU-hours on premises left free while
   instances ran work (work that burst at a peak and ran on after it).
2. The autoscaler's decision alone for 10,000 waiting workloads (shapes drawn from the trace) and 20 instance
   types: CPU time, goal under 100 ms.

The simulation is event-driven with a virtual clock: the on-premises pool starts waiting work first-fit in
the scheduler's own line order (scheduler.priority.ordered: age against runtime limit and size, so short work
goes first where the rest is equal), then instances that have booted do, in the same order; new instances take
BOOT_S to boot. CPUs and memory are
not simulated (GPUs are what the trace's peaks lack); CPU-only tasks never wait. Waiting work's expected start
on premises comes from the scheduler's own estimator (scheduler.estimates.Profile, as decide() fills
`estimated_start`): running work ends at its runtime limit, which users set at 1.5x what a task really takes
(as in scheduler.simulate), and the waiting work takes the earliest window in line order.

3. The same comparison over on-premises pools of SIZES GPUs: a few long tasks decide much of a burst's
   instance-hours (whether they start on premises or on an instance), so one pool size alone says little.
"""

from __future__ import annotations

import csv
import heapq
import math
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fabrics.base import Resources
from scheduler.burst import Live, Offer, Pool, Waiting, Work, plan
from scheduler.estimates import Profile
from scheduler.model import FabricState, Job, Snapshot
from scheduler.priority import ordered
from scheduler.simulate import Task, read_trace

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT.parent / "shared" / "traces" / "openb_pod_list_default.csv"
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
ONPREM_GPUS = 40  # the trace's demand peaks well above this
SIZES = range(36, 49, 2)  # on-premises pools the comparison is repeated over (3.)
BOOT_S = 180.0
CYCLE_S = 60.0
MAX_IDLE = timedelta(minutes=10)
BURST_AFTER = timedelta(minutes=10)  # the pool's setting: burst for work expected to wait longer than this
GIB = 1024
# Instance types as a burst pool would list them (GPUs, on-demand price per hour).
OFFERS = [
    Offer("g5.xlarge", 1, 4, 16 * GIB, 1.006),
    Offer("g5.2xlarge", 1, 8, 32 * GIB, 1.212),
    Offer("g5.12xlarge", 4, 48, 192 * GIB, 5.672),
    Offer("g5.48xlarge", 8, 192, 768 * GIB, 16.288),
]


def run() -> dict[str, Any]:
    results: dict[str, Any] = {}
    path = os.environ.get("GRIDLANE_TRACE", str(TRACE))
    if not Path(path).exists():
        print(f"trace: {path} not found; set GRIDLANE_TRACE to an openb pod-list CSV")
        return {"skipped": path}
    tasks = [t for t in read_trace(path, groups=1) if t.gpus_milli <= 8000]
    results["trace"] = trace_policies(tasks)
    results["decision"] = decision_time(path)
    results["spread"] = spread(tasks)
    return results


# 1 -----------------------------------------------------------------------------------------------------
@dataclass
class Machine:
    id: int
    offer: Offer
    launched: float
    ready: float  # when it has booted
    free: int  # GPUs milli
    tasks: set[str] = field(default_factory=set)
    idle_since: float | None = None
    ended: float | None = None
    dedicated: str = ""  # the naive policy's: the one task it was launched for
    mark: float = 0.0  # busy_s and used_s are counted up to here
    busy_s: float = 0.0  # booted and running at least one task
    used_s: float = 0.0  # busy, weighted by the share of its GPUs its tasks hold

    def count(self, now: float) -> None:
        """Count the time since its tasks last changed (called before they change again, and at its end)."""
        since = max(self.mark, self.ready)
        if now > since and self.tasks:
            capacity = self.offer.gpus * 1000
            self.busy_s += now - since
            self.used_s += (now - since) * (capacity - self.free) / capacity
        self.mark = max(self.mark, now)


@dataclass
class Result:
    waits: list[float] = field(default_factory=list)
    instance_hours: float = 0.0
    gpu_hours: float = 0.0
    cost: float = 0.0
    launches: int = 0
    burst_starts: int = 0
    burst_task_hours: float = 0.0
    # Where instance-hours go (they add up to instance_hours).
    boot_hours: float = 0.0
    idle_hours: float = 0.0
    used_hours: float = 0.0
    packing_hours: float = 0.0
    spare_gpu_hours: float = 0.0  # free on premises while instances ran work (the lesser of the two)
    by_type: dict[str, list[float]] = field(default_factory=dict)  # type -> [launches, instance-hours]
    restarts: int = 0  # work that went back in line from an instance Gridlane ended under it, to restart
    lost_hours: float = 0.0  # what that work had run on the instance


def simulate(tasks: list[Task], policy: str, onprem_gpus: int = ONPREM_GPUS) -> Result:
    out = Result()
    by_name = {t.name: t for t in tasks}
    onprem_free = onprem_gpus * 1000
    pending: dict[str, Task] = {}
    machines: list[Machine] = []
    ends: list[tuple[float, str, int]] = []  # (when, task, its run)
    where: dict[str, Machine | None] = {}  # a running task -> its machine (None: on-premises)
    onprem: dict[str, float] = {}  # a task running on premises -> when it started
    dedicated: dict[str, Machine] = {}  # the naive policy's: a task -> the instance launched for it
    i, now, last = 0, 0.0, -math.inf
    # The worker sets `boot` from the pool's recent boots; here every boot takes BOOT_S.
    budget = Pool("sim", max_instances=10_000, max_idle=MAX_IDLE, boot_timeout=timedelta(hours=1),
                  budget_per_hour=1e12, budget_per_month=1e15, burst_after=BURST_AFTER,
                  boot=timedelta(seconds=BOOT_S))  # fmt: skip

    runs: dict[str, int] = {}  # a task -> its run (a restarted task's earlier end is no end)
    began: dict[str, float] = {}  # a running task -> when its run started
    # A task's wait: from its arrival to the start of the run that finishes. A task sent back in line from an
    # instance counts its thrown-away run and its second wait in line as waiting too: what its owner sees.
    waited: dict[str, float] = {}

    def start(task: Task, machine: Machine | None) -> None:
        nonlocal onprem_free
        pending.pop(task.name)
        where[task.name] = machine
        if machine is None:
            onprem_free -= task.gpus_milli
            onprem[task.name] = now
        else:
            machine.count(now)
            machine.free -= task.gpus_milli
            machine.tasks.add(task.name)
            machine.idle_since = None
            out.burst_starts += 1
            out.burst_task_hours += task.runtime / 3600
        runs[task.name] = runs.get(task.name, 0) + 1
        began[task.name] = now
        heapq.heappush(ends, (now + task.runtime, task.name, runs[task.name]))
        waited[task.name] = now - task.arrival

    def end_machine(m: Machine) -> None:
        m.count(now)
        m.ended = now
        hours = (now - m.launched) / 3600
        out.instance_hours += hours
        out.boot_hours += (min(m.ready, now) - m.launched) / 3600
        out.idle_hours += (max(0.0, now - m.ready) - m.busy_s) / 3600
        out.used_hours += m.used_s / 3600
        out.packing_hours += (m.busy_s - m.used_s) / 3600
        kind = out.by_type.setdefault(m.offer.name, [0, 0.0])
        kind[0] += 1
        kind[1] += hours
        out.gpu_hours += hours * m.offer.gpus
        out.cost += hours * m.offer.price

    while i < len(tasks) or pending or ends:
        upcoming = [tasks[i].arrival] if i < len(tasks) else []
        upcoming += [ends[0][0]] if ends else []
        upcoming += [m.ready for m in machines if m.ended is None and m.ready > now]
        upcoming += [m.idle_since + MAX_IDLE.total_seconds() for m in machines
                     if m.ended is None and m.idle_since is not None and policy == "gridlane"]  # fmt: skip
        if not upcoming:
            break
        now = max(min(upcoming), last + CYCLE_S)
        if last > -math.inf:
            on_burst = sum(m.offer.gpus * 1000 - m.free for m in machines if m.ended is None and m.tasks)
            out.spare_gpu_hours += (now - last) * min(onprem_free, on_burst) / 1000 / 3600
        last = now
        while ends and ends[0][0] <= now:
            _, name, run = heapq.heappop(ends)
            if run != runs[name]:
                continue  # it went back in line and runs again
            machine = where.pop(name)
            if policy == "naive" and name in dedicated and dedicated[name].ended is None:
                end_machine(dedicated[name])  # its workload completed (wherever it ran): the instance ends
            if machine is None:
                onprem_free += by_name[name].gpus_milli
                del onprem[name]
            else:
                machine.count(now)
                machine.free += by_name[name].gpus_milli
                machine.tasks.discard(name)
                if not machine.tasks:
                    machine.idle_since = now
        while i < len(tasks) and tasks[i].arrival <= now:
            pending[tasks[i].name] = tasks[i]
            i += 1
        # On-premises first, in line order; then machines that have booted.
        line = _in_line(now, pending, onprem_gpus)
        for task in line:
            if task.gpus_milli <= onprem_free:
                start(task, None)
        live = [m for m in machines if m.ended is None]
        for task in (t for t in line if t.name in pending):
            for m in live:
                if m.ready <= now and task.gpus_milli <= m.free and (policy != "naive" or m.dedicated == task.name):
                    start(task, m)
                    break
        if policy == "none":
            continue
        if policy == "naive":
            bound = {m.dedicated for m in live}
            for task in pending.values():
                if task.name in bound:
                    continue
                offer = next(o for o in OFFERS if o.gpus * 1000 >= task.gpus_milli)  # cheapest that fits
                machines.append(
                    Machine(len(machines), offer, now, now + BOOT_S, offer.gpus * 1000, dedicated=task.name)
                )
                dedicated[task.name] = machines[-1]
                out.launches += 1
            continue
        # Gridlane: the autoscaler's own decision over this moment.
        clock = EPOCH + timedelta(seconds=now)
        running = [(by_name[n], s) for n, s in onprem.items()]
        expected = _expected_starts(clock, onprem_free, running, _in_line(now, pending, onprem_gpus))
        waiting = [Waiting(t.name, 0, "trace", Resources(t.gpus_milli, 0, 0), EPOCH + timedelta(seconds=t.arrival),
                           expected_start=expected[t.name], runtime=timedelta(seconds=_limit(t)))
                   for t in pending.values()]  # fmt: skip
        state = [
            Live(str(m.id), m.offer.name, "booting" if m.ready > now else ("idle" if not m.tasks else "busy"),
                 m.offer.price, Resources(m.free, 10**9, 10**9), EPOCH + timedelta(seconds=m.launched),
                 EPOCH + timedelta(seconds=m.idle_since) if m.idle_since is not None else None,
                 tuple(Work(EPOCH + timedelta(seconds=began[n]), timedelta(seconds=_limit(by_name[n])), True)
                       for n in sorted(m.tasks)))
            for m in live
        ]  # fmt: skip
        # The room on premises, as the worker passes the free room of the fabrics tried before the pool.
        decided = plan(clock, budget, OFFERS, state, waiting, elsewhere=[Resources(onprem_free, 10**9, 10**9)])
        for t in decided.terminate:
            m = machines[int(t.id)]
            # Its work goes back in line (the trace's queue is preemptible), to restart from the beginning.
            m.count(now)
            for name in sorted(m.tasks):
                del where[name]
                runs[name] += 1  # its end event no longer counts
                pending[name] = by_name[name]
                out.restarts += 1
                out.lost_hours += (now - began[name]) / 3600
            m.tasks.clear()
            m.free = m.offer.gpus * 1000
            end_machine(m)
        for launch in decided.launch:
            offer = next(o for o in OFFERS if o.name == launch.instance_type)
            # Idle from the moment it boots, as the worker counts an enrolled instance (follow_agents).
            ready = now + BOOT_S
            machines.append(Machine(len(machines), offer, now, ready, offer.gpus * 1000, idle_since=ready))
            out.launches += 1
    for m in machines:
        if m.ended is None:
            end_machine(m)
    out.waits = list(waited.values())
    return out


def _limit(task: Task) -> float:
    """The runtime limit its user asked for: 1.5x what it really takes, at least a minute (scheduler.simulate)."""
    return max(60.0, 1.5 * task.runtime)


def _in_line(now: float, pending: dict[str, Task], onprem_gpus: int) -> list[Task]:
    """The waiting work in the scheduler's line order (one team, one priority: age, runtime limit and size
    decide). The size term is taken against the on-premises pool: the bench's burst pool has no maximum."""
    jobs = tuple(Job(t.name, 0, 0, Resources(t.gpus_milli, 0, 0), submitted_at=EPOCH + timedelta(seconds=t.arrival),
                     runtime_limit_s=int(_limit(t))) for t in pending.values())  # fmt: skip
    fabric = FabricState(1, "on premises", Resources(onprem_gpus * 1000, 0, 0))
    return [pending[job.id] for job in ordered(Snapshot(EPOCH + timedelta(seconds=now), {1: fabric}, {}, jobs))]


def _expected_starts(
    clock: datetime, free: int, running: list[tuple[Task, float]], line: list[Task]
) -> dict[str, datetime | None]:
    """When the waiting work is expected to start on premises: the scheduler's estimator over running work's
    runtime limits, the waiting work in line order (None past its first MAX_PER_FABRIC, as in decide())."""
    releases = sorted(
        (max(clock, EPOCH + timedelta(seconds=started + _limit(t))), (t.gpus_milli, 0, 0)) for t, started in running
    )
    profile = Profile(clock, (free, 0, 0), releases)
    return {t.name: profile.earliest((t.gpus_milli, 0, 0), int(_limit(t))) for t in line}


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


def trace_policies(tasks: list[Task]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for policy in ("none", "gridlane", "naive"):
        started = time.process_time()
        r = simulate(tasks, policy)
        out[policy] = {
            "p50_wait_s": round(_p(r.waits, 0.5), 1),
            "p95_wait_s": round(_p(r.waits, 0.95), 1),
            "mean_wait_s": round(sum(r.waits) / max(1, len(r.waits)), 1),
            "instance_hours": round(r.instance_hours, 1),
            "gpu_hours": round(r.gpu_hours, 1),
            "cost": round(r.cost, 2),
            "launches": r.launches,
            "burst_starts": r.burst_starts,
            "burst_task_hours": round(r.burst_task_hours, 1),
            "p99_wait_s": round(_p(r.waits, 0.99), 1),
            "instance_hours_in": {
                "boot": round(r.boot_hours, 1),
                "idle": round(r.idle_hours, 1),
                "tasks": round(r.used_hours, 1),
                "packing_waste": round(r.packing_hours, 1),
            },
            "spare_onprem_gpu_hours": round(r.spare_gpu_hours, 1),
            "restarts": r.restarts,
            "lost_task_hours": round(r.lost_hours, 1),
            "by_type": {t: {"launches": n, "instance_hours": round(h, 1)} for t, (n, h) in sorted(r.by_type.items())},
            "sim_cpu_s": round(time.process_time() - started, 2),
        }
    ours, naive, none = out["gridlane"], out["naive"], out["none"]
    wait_ratio = ours["p95_wait_s"] / max(naive["p95_wait_s"], 1e-9)
    hours_ratio = ours["instance_hours"] / max(naive["instance_hours"], 1e-9)
    out["p95_wait_ratio_vs_naive"] = round(wait_ratio, 3)
    out["instance_hours_ratio_vs_naive"] = round(hours_ratio, 3)
    print(f"trace: {len(tasks)} tasks, {ONPREM_GPUS} GPUs on premises, instances boot in {BOOT_S:.0f} s, "
          f"idle instances end after {MAX_IDLE.total_seconds() / 60:.0f} min, Gridlane bursts for work expected "
          f"to wait over {BURST_AFTER.total_seconds() / 60:.0f} min")  # fmt: skip
    for name in ("none", "gridlane", "naive"):
        r = out[name]
        print(f"  {name:<9} p95 wait {r['p95_wait_s']:>10} s  p50 {r['p50_wait_s']:>8} s  instance-hours "
              f"{r['instance_hours']:>9}  GPU-hours {r['gpu_hours']:>9}  cost {r['cost']:>10}  "
              f"launches {r['launches']}  task-hours on burst {r['burst_task_hours']}")  # fmt: skip
    print("  where instance-hours go: booting, booted with no task, the GPU share tasks hold, the share left empty")
    for name in ("gridlane", "naive"):
        r = out[name]
        parts = "  ".join(f"{k.replace('_', ' ')} {v:>6} ({v / max(r['instance_hours'], 1e-9):4.0%})"
                          for k, v in r["instance_hours_in"].items())  # fmt: skip
        print(f"  {name:<9} {parts}")
        types = ", ".join(f"{t} {v['launches']}x {v['instance_hours']} h" for t, v in r["by_type"].items())
        print(f"  {'':<9} p99 wait {r['p99_wait_s']} s; GPU-hours free on premises while instances ran work "
              f"{r['spare_onprem_gpu_hours']}; {types}; back in line to restart on premises {r['restarts']} "
              f"({r['lost_task_hours']} task-hours run lost)")  # fmt: skip
    cost_ratio = ours["cost"] / max(naive["cost"], 1e-9)
    out["cost_ratio_vs_naive"] = round(cost_ratio, 3)
    vs_none = ours["p95_wait_s"] / max(none["p95_wait_s"], 1e-9)
    print(f"  gridlane vs naive: p95 wait {wait_ratio:.2f}x (goal <= 1.2x), instance-hours {hours_ratio:.2f}x "
          f"(goal <= 0.6x), cost {cost_ratio:.2f}x; vs no burst: p95 wait {vs_none:.3f}x")  # fmt: skip
    return out


# 2 -----------------------------------------------------------------------------------------------------
def decision_time(path: str, waiting: int = 10_000, types: int = 20) -> dict[str, Any]:
    """plan() over 10,000 waiting workloads whose requests are the trace's own (GPUs, CPUs, memory)."""
    shapes = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            gpus = int(row["num_gpu"] or 0) * int(row["gpu_milli"] or 0)
            if 0 < gpus <= 8000:
                shapes.append(Resources(gpus, int(row["cpu_milli"]), int(row["memory_mib"])))
    now = EPOCH + timedelta(days=1)
    work = [Waiting(f"w{i}", i % 12, f"team{i % 12}", shapes[i % len(shapes)], now - timedelta(seconds=i))
            for i in range(waiting)]  # fmt: skip
    offers = [Offer(f"{family}.{size}", gpus, gpus * 12, gpus * 96 * GIB, round(gpus * price, 3))
              for family, price in (("g5", 1.4), ("g6", 1.1), ("p4d", 4.1), ("p5", 6.9), ("g6e", 1.9))
              for size, gpus in (("xlarge", 1), ("12xlarge", 4), ("24xlarge", 4), ("48xlarge", 8))][:types]  # fmt: skip
    pool = Pool("bench", max_instances=200, budget_per_hour=5_000, budget_per_month=1e9)
    runs = []
    for _ in range(5):
        started = time.process_time()
        decided = plan(now, pool, offers, [], work)
        runs.append(time.process_time() - started)
    best = min(runs)
    print(f"decision: {waiting} waiting workloads, {len(offers)} instance types: {best * 1000:.1f} ms CPU "
          f"(best of 5; goal < 100 ms); {len(decided.launch)} launches")  # fmt: skip
    return {"cpu_ms": round(best * 1000, 1), "launches": len(decided.launch), "goal_ms": 100}


# 3 -----------------------------------------------------------------------------------------------------
def spread(tasks: list[Task]) -> dict[str, Any]:
    """Gridlane against the naive policy over on-premises pools of SIZES GPUs: the ratios per size, and their
    range."""
    rows: dict[int, dict[str, float]] = {}
    print(f"over on-premises pools of {SIZES[0]}..{SIZES[-1]} GPUs, gridlane vs naive (goal: p95 wait <= 1.2x at "
          "instance-hours <= 0.6x):")  # fmt: skip
    for gpus in SIZES:
        ours, naive = simulate(tasks, "gridlane", gpus), simulate(tasks, "naive", gpus)
        row = rows[gpus] = {
            "p95_wait": round(_p(ours.waits, 0.95) / max(_p(naive.waits, 0.95), 1e-9), 3),
            "instance_hours": round(ours.instance_hours / max(naive.instance_hours, 1e-9), 3),
            "cost": round(ours.cost / max(naive.cost, 1e-9), 3),
        }
        met = row["p95_wait"] <= 1.2 and row["instance_hours"] <= 0.6
        print(f"  {gpus:>3} GPUs  p95 wait {row['p95_wait']:5.2f}x  instance-hours {row['instance_hours']:5.2f}x  "
              f"cost {row['cost']:5.2f}x  ({ours.instance_hours:.0f} h against {naive.instance_hours:.0f} h)"
              f"{'  met' if met else ''}")  # fmt: skip
    ranges = {
        k: [min(r[k] for r in rows.values()), max(r[k] for r in rows.values())] for k in next(iter(rows.values()))
    }
    print("  range: " + ", ".join(f"{k.replace('_', ' ')} {lo:.2f}x..{hi:.2f}x" for k, (lo, hi) in ranges.items()))
    return {"by_onprem_gpus": rows, "range": ranges}
