"""Where an unused reservation holds a job: the fit arithmetic both owed passes run for every job in line.

A level (a team, or a department above it) holds work on a fabric where the work's need, added to the level's
use there, stays within the level's reservation in every resource the level reserves (Ledger.within_reservation;
here unrolled over the three resources, with each level's bounds worked out once per cycle).

Two invariants let a pass set most work aside at once:
- A level's use is never below zero, so work beyond the most a level reserves on any healthy fabric (its bound)
  is within its unused reservation on none.
- Within one pass, a level's use only grows as work is admitted; only preemption gives any back. Once a shape
  of work finds no room under some levels, no later job of that shape finds any under them in the same pass,
  until something is preempted. The passes remember such (levels, shape) pairs in a `passed` set.
"""

from __future__ import annotations

import math

from scheduler.ledger import ZERO, Amount, Ledger, PerFabric
from scheduler.routes import Route, Shape

# A level as room() reads it: the level, its bound in each resource, its reservations and its use (the ledger's
# own maps by fabric, read as they change).
Bounded = tuple[int, float, float, float, PerFabric, PerFabric]
# Levels with the most any of them reserves on a healthy fabric, in each resource (below zero where none does).
Levels = tuple[tuple[int, ...], float, float, float]
Passed = set[tuple[tuple[int, ...], Shape]]


class Reservations:
    """Unused reservations by level, for one cycle: bounds worked out when first asked, use read live."""

    __slots__ = ("_bounds", "_healthy", "_ledger")

    def __init__(self, ledger: Ledger, healthy: set[int]) -> None:
        self._ledger = ledger
        self._healthy = healthy
        self._bounds: dict[tuple[int, ...], tuple[Bounded, ...]] = {}

    def levels(self, levels: tuple[int, ...]) -> Levels:
        """These levels as room() takes them, with the most any of them reserves on a healthy fabric in each
        resource (below zero in all where none reserves anything)."""
        bounded = self._bounds.get(levels)
        if bounded is None:
            ledger = self._ledger
            bounded = self._bounds[levels] = tuple(
                (level, *self._bound(level), ledger.reserved.get(level) or {}, ledger.group_used[level])
                for level in levels
            )
        if not bounded:
            return (levels, -1, -1, -1)
        return (levels, max(b[1] for b in bounded), max(b[2] for b in bounded), max(b[3] for b in bounded))

    def _bound(self, level: int) -> tuple[float, float, float]:
        """The most a level reserves on any one healthy fabric, in each resource: unbounded in one it leaves
        unreserved on some fabric; below zero in all where it reserves nothing."""
        reserved = (self._ledger.reserved.get(level) or {}).get
        found = {r for fid in self._healthy if (r := reserved(fid)) is not None}
        found.discard(ZERO)
        if not found:
            return (-1, -1, -1)
        return (
            max(r[0] or math.inf for r in found),
            max(r[1] or math.inf for r in found),
            max(r[2] or math.inf for r in found),
        )

    def room(self, levels: tuple[int, ...], route: Route, passed: Passed) -> list[tuple[int, Amount]]:
        """The job's healthy targets, in its route's order, where the unused reservation of one of these levels
        (as levels() made them) holds it; none: it is passed over. A (levels, shape) pair that finds none is
        added to `passed`, and found in it again answers none at once (see the module's invariants)."""
        seen = (levels, route.shape)
        if seen in passed:
            return []
        healthy = self._healthy
        bounded = self._bounds[levels]
        found = []
        for fid, need in route.targets:
            if fid not in healthy:
                continue
            n0, n1, n2 = need
            for _level, b0, b1, b2, reserved, used_at in bounded:
                if n0 > b0 or n1 > b1 or n2 > b2:
                    continue  # beyond the level's bound: beyond its unused reservation here too
                r = reserved.get(fid)
                if r is None or not (r[0] or r[1] or r[2]):
                    continue
                used = used_at.get(fid, ZERO)
                if (
                    (not r[0] or used[0] + n0 <= r[0])
                    and (not r[1] or used[1] + n1 <= r[1])
                    and (not r[2] or used[2] + n2 <= r[2])
                ):
                    found.append((fid, need))
                    break
        if not found:
            passed.add(seen)
        return found
