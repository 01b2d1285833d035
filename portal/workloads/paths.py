"""A workload's own paths on the portal (its callbacks, its connect link), for a whole batch of jobs at once.

Every job is told two to four of them at dispatch. reverse() costs tens of microseconds a call (the resolver's
thread-locals, its patterns), which made it a tenth of the worker's CPU under a stream of submits; `Paths`
reverses each URL name once, around a stand-in id, and puts each workload's id in its place. One is made per
batch, so it always answers for the URLconf and script prefix of the moment it was made.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.urls import reverse

STAND_IN = str(UUID(int=0))  # a valid id for every pattern (<uuid:pk>, [^/.]+), met nowhere else in a path


class Paths:
    """reverse(name, args=[pk]) for many workloads: the same answers, one reverse() per name."""

    def __init__(self) -> None:
        self._around: dict[str, tuple[str, str]] = {}

    def of(self, name: str, pk: UUID | str) -> str:
        around = self._around.get(name)
        if around is None:
            before, _, after = reverse(name, args=[STAND_IN]).partition(STAND_IN)
            around = self._around[name] = (before, after)
        before, after = around
        return f"{before}{pk if isinstance(pk, UUID) else UUID(pk)}{after}"


def path_of(name: str, pk: Any, paths: Paths | None = None) -> str:
    """One path, through `paths` where the caller has them (a dispatch's batch), else reverse() itself."""
    return paths.of(name, pk) if paths is not None else reverse(name, args=[pk])
