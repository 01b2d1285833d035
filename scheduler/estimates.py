"""Estimated starts for waiting work, from running work's runtime limits (an upper bound on when it ends).

Per fabric, a step function of free capacity over time; each waiting job, in priority order, takes the
earliest window where it fits for its whole runtime, and holds it, so later estimates queue behind it.
Only the first MAX_PER_FABRIC waiting jobs per fabric get an estimate: beyond that it says little."""

from __future__ import annotations

import bisect
from datetime import datetime, timedelta

from scheduler.ledger import Amount

MAX_PER_FABRIC = 50


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
                self._hold(i, end, need)
                return start
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
