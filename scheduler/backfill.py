"""Backfill: when the head of the line cannot start, work out when it could (from running work's runtime
limits), and let later work run now only if it ends before then or leaves what the head needs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler.ledger import Amount, add, fits, sub


@dataclass
class Shadow:
    """The head's reservation on one fabric: it starts at `start`; `extra` is free then beyond its need."""

    head_id: str
    start: datetime
    extra: Amount

    def admits(self, now: datetime, runtime_s: int, need: Amount) -> bool:
        """Whether work of this size and runtime can start now without delaying the head."""
        if now + timedelta(seconds=runtime_s) <= self.start:
            return True  # done before the head needs the capacity
        if fits(need, self.extra):
            self.extra = sub(self.extra, need)  # runs past the head's start, in what the head leaves free
            return True
        return False


def shadow(head_id: str, need: Amount, free: Amount, releases: list[tuple[datetime, Amount]]) -> Shadow | None:
    """When `need` fits as running work ends (releases sorted by time); None if it never does."""
    for when, amount in releases:
        free = add(free, amount)
        if fits(need, free):
            return Shadow(head_id, when, sub(free, need))
    return None
