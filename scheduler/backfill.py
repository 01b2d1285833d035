"""Backfill: when work at the front of the line cannot start, reserve when it could (from running work's
runtime limits), and let later work run now only where it delays none of those reserved starts.

As Slurm's backfill does, each fabric's plan holds a reservation for each of the first RESERVED jobs that wait
there for capacity, not only for the head: later, smaller work fills the gaps before and around them, and
nothing that starts now pushes any of them back. Past RESERVED, waiting work reserves nothing (what comes
free may go to work behind it), which keeps a cycle's cost bounded however long the line.

Work reserves only once it has waited RESERVE_AFTER_S (as Slurm's bf_min_age_reserve does): a reservation
keeps capacity idle ahead of its start, and for work that just arrived on a busy fabric that idle capacity costs
more waiting than it saves. Replayed on the openb lists (bench_peers), reserving at once for a many-GPU job that
just arrived blocked the fractional work behind it (a list where nearly all GPU work shares GPUs waited 6 % longer
than Kueue's FIFO, which reserves nothing); reserving only after an hour keeps that capacity in use, while work
that keeps being passed over still gets its reservation, so nothing starves."""

from __future__ import annotations

from bisect import bisect_left
from datetime import datetime, timedelta

from scheduler.ledger import Amount, add
from scheduler.model import Job

RESERVED = 4  # reservations planned per fabric and cycle
RESERVE_AFTER_S = 3600  # how long work waits before it reserves its start (module docstring)


def reserves(job: Job, now: datetime) -> bool:
    """Whether waiting work reserves its start: it has waited RESERVE_AFTER_S (work with no submission time has)."""
    return job.submitted_at is None or (now - job.submitted_at).total_seconds() >= RESERVE_AFTER_S


class Plan:
    """Free capacity on one fabric from now on: free[i] holds from times[i] until times[i+1] (the last, for ever).
    Work admitted now and the reservations take their windows out of it."""

    __slots__ = ("free", "starts", "times")

    def __init__(self, now: datetime, free: Amount, releases: list[tuple[datetime, Amount]]) -> None:
        """`releases`: what running work gives back, and when (each at its runtime limit), sorted by time."""
        self.times = [now]
        self.free = [free]
        for when, amount in releases:
            if when <= self.times[-1]:
                self.free[-1] = add(self.free[-1], amount)
            else:
                self.times.append(when)
                self.free.append(add(self.free[-1], amount))
        self.starts: list[datetime] = []  # the reserved starts, in the order they were planned

    def copy(self) -> Plan:
        """A plan of its own with the same windows and reserved starts (what one changes, the other does not see)."""
        plan = Plan.__new__(Plan)
        plan.times, plan.free, plan.starts = list(self.times), list(self.free), list(self.starts)
        return plan

    def admits(self, runtime_s: int, need: Amount) -> bool:
        """Whether work of this size and runtime can start now without delaying any reserved start; when it can,
        its window is taken."""
        times, free = self.times, self.free
        end = times[0] + timedelta(seconds=runtime_s)
        g, c, m = need
        for k in range(len(times)):
            if times[k] >= end:
                break
            f = free[k]
            if g > f[0] or c > f[1] or m > f[2]:
                return False
        self._take(times[0], end, need)
        return True

    def reserve(self, runtime_s: int, need: Amount) -> datetime | None:
        """Reserve the earliest window where `need` stays free for the whole runtime, and say when it starts;
        None when the fabric's reservations are all planned, or it never fits."""
        if len(self.starts) >= RESERVED:
            return None
        start = self.earliest(runtime_s, need)
        if start is not None:
            self._take(start, start + timedelta(seconds=runtime_s), need)
            self.starts.append(start)
        return start

    def earliest(self, runtime_s: int, need: Amount) -> datetime | None:
        """The start of the earliest window where `need` stays free for the whole runtime (None: never); nothing
        is taken."""
        times, free = self.times, self.free
        duration = timedelta(seconds=runtime_s)
        g, c, m = need
        n = len(times)
        for i in range(n):
            f = free[i]
            if g > f[0] or c > f[1] or m > f[2]:
                continue
            end = times[i] + duration
            j = i + 1
            while j < n and times[j] < end:
                f = free[j]
                if g > f[0] or c > f[1] or m > f[2]:
                    break
                j += 1
            if j == n or times[j] >= end:
                return times[i]
        return None

    @property
    def first(self) -> datetime | None:
        """The earliest reserved start (what later work waits behind); None before any is planned."""
        return min(self.starts) if self.starts else None

    def _take(self, start: datetime, end: datetime, need: Amount) -> None:
        times, free = self.times, self.free
        for point in (start, end):
            k = bisect_left(times, point)
            if k == len(times) or times[k] != point:
                times.insert(k, point)
                free.insert(k, free[k - 1])
        g, c, m = need
        for k in range(bisect_left(times, start), bisect_left(times, end)):
            f = free[k]
            free[k] = (f[0] - g, f[1] - c, f[2] - m)
