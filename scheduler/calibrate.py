"""How good estimated starts are, measured on a replayed trace: the simulator runs the trace once with estimates
from runtime limits and once with learned runtimes (the same decisions: learned runtimes change estimates only),
and records, as the portal does, every task's first and last estimate before it started, the error of the last
(actual start minus estimate), and whether the start fell inside the band the queue put around that estimate.

Runtime limits: a trace records how long each task ran, not the limit its user asked for. Users pick a round
limit above what they expect, so a task's limit is its runtime rounded up to the next tier (TIERS: 1 h, 4 h,
24 h, 7 d, 30 d; beyond that, whole multiples of 30 d).

Learned runtimes are learned as the replay goes, from the tasks that have finished: per team, queue and shape
(estimates.shape_of), the LEARNED_PERCENTILE of the runs submitted and ended in the last WINDOW_S (at least
MIN_HISTORY of them), as portal.workloads.calibration computes them from the database. A queue's band around new
estimates comes from the errors of the starts of the last BAND_WINDOW_S (estimates.band).
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from scheduler.estimates import band, learned_runtime, percentile, shape_of
from scheduler.model import Decisions, Snapshot
from scheduler.simulate import EPOCH, Clock, Item, Observer, Task, simulate

DAY = 86400
TIERS = (3600, 4 * 3600, DAY, 7 * DAY, 30 * DAY)
WINDOW_S = 30 * DAY  # learned runtimes: runs that ended this recently
BAND_WINDOW_S = 7 * DAY  # the band: starts this recent


def tier_limit(task: Task) -> int:
    """The runtime limit a user would have asked for: the runtime rounded up to the next tier."""
    for tier in TIERS:
        if task.runtime <= tier:
            return tier
    return math.ceil(task.runtime / TIERS[-1]) * TIERS[-1]


class Learner:
    """Learned runtimes from finished runs, per shape, over the last WINDOW_S; the table is rebuilt only for
    shapes whose runs changed."""

    def __init__(self) -> None:
        self.runs: defaultdict[Any, deque[tuple[float, float]]] = defaultdict(deque)  # shape -> (ended, runtime)
        self.limits: dict[Any, int] = {}
        self.table: dict[Any, int] = {}
        self.dirty: set[Any] = set()
        self.now = 0.0

    def finished(self, item: Item, ended: float, runtime: float) -> None:
        if ended - item.arrival > WINDOW_S:
            return  # submitted before the window (the portal's query leaves such runs out too)
        shape = shape_of(item.job)
        self.runs[shape].append((ended, runtime))
        self.limits[shape] = item.job.runtime_limit_s
        self.dirty.add(shape)

    def at(self, now: float) -> dict[Any, int]:
        """The table as it stands at `now` (seconds from the trace's start)."""
        if now - self.now >= 3600:  # runs age out of the window: look at every shape once an hour
            self.dirty.update(self.runs)
            self.now = now
        for shape in self.dirty:
            runs = self.runs[shape]
            while runs and runs[0][0] < now - WINDOW_S:
                runs.popleft()
            learned = learned_runtime([r for _, r in runs], self.limits[shape])
            if learned is None:
                self.table.pop(shape, None)
            else:
                self.table[shape] = learned
        self.dirty.clear()
        return self.table


@dataclass
class Errors:
    """What a replay's estimates came to."""

    last: list[float] = field(default_factory=list)  # signed error of each start's last estimate (s)
    first: list[float] = field(default_factory=list)  # of its first estimate
    starts: dict[str, float] = field(default_factory=dict)  # task -> its start (the decisions' fingerprint)
    banded: int = 0  # starts whose last estimate had a band
    inside: int = 0  # of those, starts inside it
    bands: list[tuple[int, int]] = field(default_factory=list)


class Watch(Observer):
    """Records estimates as the worker does, and their errors at each start."""

    def __init__(self, learner: Learner | None) -> None:
        self.learner = learner
        self.out = Errors()
        self.first: dict[str, float] = {}
        self.last: dict[str, tuple[float, tuple[int, int] | None]] = {}  # task -> (estimate, band then)
        self.recent: deque[tuple[float, float]] = deque()  # (start, signed error), the last BAND_WINDOW_S
        self.band: tuple[int, int] | None = None
        self.band_stale = False

    def started(self, item: Item, now: float) -> None:
        name = item.job.id
        self.out.starts[name] = now
        first = self.first.pop(name, None)
        last = self.last.pop(name, None)
        if first is None or last is None:
            return
        estimate, shown = last
        error = now - estimate
        self.out.last.append(error)
        self.out.first.append(now - first)
        if shown is not None:
            self.out.banded += 1
            self.out.inside += shown[0] <= error <= shown[1]
        self.recent.append((now, error))
        self.band_stale = True

    def stopped(self, item: Item, started: float, now: float, preempted: bool) -> None:
        if not preempted and self.learner is not None:
            self.learner.finished(item, now, now - started)

    def cycled(self, clock: Clock, snapshot: Snapshot, decisions: Decisions) -> None:
        now = clock.now
        recent = self.recent
        while recent and recent[0][0] < now - BAND_WINDOW_S:
            recent.popleft()
            self.band_stale = True
        if self.band_stale:
            self.band = band([e for _, e in recent])
            self.band_stale = False
            if self.band is not None:
                self.out.bands.append(self.band)
        first, last, shown = self.first, self.last, self.band
        for w in decisions.waiting:
            if w.estimated_start is not None:
                at = (w.estimated_start - EPOCH).total_seconds()
                first.setdefault(w.job_id, at)
                last[w.job_id] = (at, shown)


def replay(tasks: list[Task], *, learned: bool, groups: int = 4, gpus: int = 40, cycle_seconds: float = 60,
           limit_of: Callable[[Task], int] = tier_limit) -> Errors:  # fmt: skip
    """Replay the tasks through decide() and measure the estimates: from limits, or with learned runtimes."""
    learner = Learner() if learned else None
    watch = Watch(learner)

    def table(now: datetime) -> dict[Any, int]:
        return learner.at((now - EPOCH).total_seconds()) if learner is not None else {}

    simulate(tasks, policy="gridlane", groups=groups, gpus=gpus, cycle_seconds=cycle_seconds, limit_of=limit_of,
             watch=watch, learned=table if learned else None)  # fmt: skip
    return watch.out


def summary(out: Errors) -> dict[str, Any]:
    """Median and p90 absolute error of last and first estimates, and the band's coverage."""
    last = [abs(e) for e in out.last]
    first = [abs(e) for e in out.first]
    return {
        "estimated_starts": len(out.last),
        "median_abs_error_s": round(percentile(last, 50) or 0.0, 1),
        "p90_abs_error_s": round(percentile(last, 90) or 0.0, 1),
        "first_median_abs_error_s": round(percentile(first, 50) or 0.0, 1),
        "first_p90_abs_error_s": round(percentile(first, 90) or 0.0, 1),
        "banded": out.banded,
        "band_coverage": round(out.inside / out.banded, 4) if out.banded else None,
        "median_band_width_s": percentile([high - low for low, high in out.bands], 50),
    }
