"""Estimated starts for waiting work, from running work's runtime limits (an upper bound on when it ends).

Per fabric, a step function of free capacity over time; each waiting job, in priority order, takes the
earliest window where it fits for its whole runtime, and holds it, so later estimates queue behind it.
Only the first MAX_PER_FABRIC waiting jobs per fabric get an estimate: beyond that it says little.

Learned runtimes: where a team has run enough work of one shape in one queue lately (MIN_HISTORY finished
runs), an estimate takes such work to run as long as LEARNED_PERCENTILE of those runs did, never longer than
its limit (`expected_runtime`); the portal computes the table (portal.workloads.calibration) and the simulator
learns it as it goes (scheduler.calibrate). Only estimates use it: admission and backfill plan with limits,
which bound a run for sure. The band put around an estimate comes from the signed errors (actual start minus
estimate) of recent starts: their BAND_LOW and BAND_HIGH percentiles (`band`)."""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from scheduler.ledger import Amount
from scheduler.model import Job

MAX_PER_FABRIC = 50
MIN_HISTORY = 5  # finished runs of a shape before its learned runtime is used
LEARNED_PERCENTILE = 75.0
BAND_LOW, BAND_HIGH = 5.0, 95.0  # the central 90 % of recent errors
MIN_ERRORS = 5  # recent errors before a queue puts a band around its estimates

# A learned runtime's key: (team, queue, GPUs per node in milli, nodes, runtime limit in seconds).
Shape = tuple[int, int, int, int, int]


def shape_of(job: Job) -> Shape:
    return (job.group_id, job.queue_id, job.per_node.gpus_milli, job.nodes, job.runtime_limit_s)


def expected_runtime(job: Job, learned: Mapping[Shape, int]) -> int:
    """How long an estimate takes the job to run: its shape's learned runtime, at most its limit; else the limit."""
    limit = job.runtime_limit_s
    if not learned:
        return limit
    seen = learned.get(shape_of(job))
    return limit if seen is None else min(seen, limit)


def percentile(values: Sequence[float], p: float) -> float | None:
    """The p-th percentile (0-100) of values, by linear interpolation between the nearest ranks; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def learned_runtime(runtimes: Sequence[float], limit_s: int) -> int | None:
    """A shape's learned runtime from its finished runs (seconds), capped at its limit; None below MIN_HISTORY."""
    if len(runtimes) < MIN_HISTORY:
        return None
    seen = percentile(runtimes, LEARNED_PERCENTILE) or 0.0
    return max(1, min(limit_s, int(seen + 0.999)))


def band(errors: Sequence[float]) -> tuple[int, int] | None:
    """The band put around a new estimate, as offsets in seconds (low <= 0 <= high), from recent signed errors
    (actual start minus estimate); None below MIN_ERRORS."""
    if len(errors) < MIN_ERRORS:
        return None
    low, high = percentile(errors, BAND_LOW) or 0.0, percentile(errors, BAND_HIGH) or 0.0
    return min(0, int(low // 1)), max(0, -int(-high // 1))


class Profile:
    """Free capacity on one fabric from `now` on: free[i] holds from times[i] until times[i+1]."""

    def __init__(self, now: datetime, free: Amount, releases: list[tuple[datetime, Amount]]) -> None:
        times = self.times = [now]
        out = self.free = [free]
        last = now
        for when, amount in releases:
            when = max(when, now)
            f = out[-1]
            f = (f[0] + amount[0], f[1] + amount[1], f[2] + amount[2])
            if when == last:
                out[-1] = f
            else:
                times.append(when)
                out.append(f)
                last = when
        self.estimated = 0

    def earliest(self, need: Amount, runtime_s: int, duration: timedelta | None = None) -> datetime | None:
        """The earliest start where `need` stays free for the whole runtime; the window is then held.
        `duration`: the runtime as a timedelta, where the caller has it."""
        if self.estimated >= MAX_PER_FABRIC:
            return None
        self.estimated += 1
        if duration is None:
            duration = timedelta(seconds=runtime_s)
        i = self._fit(need, duration)
        if i is None:
            return None
        start = self.times[i]
        self._hold(i, start + duration, need)
        return start

    def peek(self, need: Amount, duration: timedelta) -> datetime | None:
        """The earliest start where `need` stays free for `duration`, without holding the window (nor counting it
        among the MAX_PER_FABRIC estimates): a look, for ranking where work would start first."""
        i = self._fit(need, duration)
        return None if i is None else self.times[i]

    def _fit(self, need: Amount, duration: timedelta) -> int | None:
        """The first step from which `need` stays free for `duration`; None when none does."""
        times, free = self.times, self.free
        n = len(times)
        g, c, m = need
        i = 0
        while i < n:
            start = times[i]
            end = start + duration
            j = i
            while j < n and times[j] < end:
                f = free[j]
                if g > f[0] or c > f[1] or m > f[2]:
                    break
                j += 1
            if j == n or times[j] >= end:
                return i
            # Step j is short and lies inside the window of every start from times[i] to times[j] (they are no
            # later than times[j], which is before times[i] + duration): none of them can hold it either.
            i = j + 1
        return None

    def _hold(self, i: int, end: datetime, need: Amount) -> None:
        """Hold `need` from times[i] (a step's start: the times only ever hold distinct points, in order) until
        `end`."""
        times, free = self.times, self.free
        if end < times[i]:  # (a runtime below zero holds nothing)
            k = bisect.bisect_left(times, end)
            if times[k] != end:
                times.insert(k, end)
                free.insert(k, free[k - 1])
            return
        k = bisect.bisect_left(times, end, i)
        if k == len(times) or times[k] != end:
            times.insert(k, end)
            free.insert(k, free[k - 1])
        g, c, m = need
        for x in range(i, k):
            f = free[x]
            free[x] = (f[0] - g, f[1] - c, f[2] - m)
