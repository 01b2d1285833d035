"""What a fabric has free now, in its own terms: one observation, kept with its age.

A fabric that keeps a queue of its own (Slurm, PBS, Kubernetes) is shared with people outside Gridlane: its
declaration says what it holds, its observation what is free right now, whoever uses the rest. An observation
is split into pools (a Slurm partition's GPUs of one type, a Kubernetes GPU resource name, a PBS queue's
accelerators), each with what is free and what is in use by anyone; `free` is the fabric's total free (a node in
two pools counts once) and `largest` the most free on any one node (what a one-node request fits into).

Invariants: counts are never negative; free <= total per pool; an observation only says where and when work
could start, never whether a team may (that is Gridlane's reservations and limits, which count its own work).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fabrics.base import Resources

# A GPU type the fabric does not name: a request that names a type does not fit it.
UNTYPED = ""


@dataclass(frozen=True)
class Pool:
    """GPUs of one type in one part of the fabric (a partition, a resource name, a queue)."""

    name: str
    gpu_type: str
    gpus_total: int
    gpus_free: int
    nodes: int = 0  # usable nodes in the pool (drained, down and reserved ones are left out)

    @property
    def gpus_used(self) -> int:
        """GPUs in use by anyone, Gridlane included."""
        return self.gpus_total - self.gpus_free


@dataclass(frozen=True)
class FreeNow:
    """One observation of a fabric (see the module docstring)."""

    pools: tuple[Pool, ...] = ()
    free: Resources = Resources()  # noqa: RUF009 (frozen)
    largest: Resources = Resources()  # noqa: RUF009 (frozen): the most free on one node
    # The fabric's own estimate of when work submitted now would start, where it gives one (Slurm's
    # `squeue --start` for pending work), else None.
    next_start: datetime | None = None
    largest_by_type: Mapping[str, int] = field(default_factory=dict)  # GPU type -> most free on one node
    free_by_type: Mapping[str, int] = field(default_factory=dict)  # GPU type -> free GPUs, each node once

    def types(self) -> set[str]:
        """The GPU types the fabric names (the untyped left out)."""
        return {p.gpu_type for p in self.pools if p.gpu_type != UNTYPED}

    def gpus_free(self, gpu_type: str = UNTYPED) -> int:
        """Free GPUs of this type (any type when UNTYPED), each pool's node counted once per type."""
        if gpu_type == UNTYPED:
            return sum(self.free_by_type.values())
        return self.free_by_type.get(gpu_type, 0)

    def room_for(self, per_node: Resources, nodes: int = 1, gpu_type: str = UNTYPED) -> bool:
        """Whether a request of `nodes` x `per_node` could start now: one node's worth within the most free on one
        node, all of it within what is free in all, and its GPUs of the named type where it names one."""
        total = per_node.times(nodes)
        if not _within(total, self.free) or not _within(per_node, self.largest):
            return False
        if gpu_type == UNTYPED or per_node.gpus_milli == 0:
            return True
        whole = -(-per_node.gpus_milli // 1000)
        return self.largest_by_type.get(gpu_type, 0) >= whole and self.gpus_free(gpu_type) >= whole * nodes

    def to_json(self) -> dict[str, Any]:
        return {
            "pools": [[p.name, p.gpu_type, p.gpus_total, p.gpus_free, p.nodes] for p in self.pools],
            "free": _triple(self.free),
            "largest": _triple(self.largest),
            "next_start": self.next_start.isoformat() if self.next_start else None,
            "largest_by_type": dict(self.largest_by_type),
            "free_by_type": dict(self.free_by_type),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FreeNow:
        start = data.get("next_start")
        return cls(
            pools=tuple(
                Pool(str(n), str(t), int(total), int(free), int(nodes)) for n, t, total, free, nodes in data["pools"]
            ),
            free=Resources(*data["free"]),
            largest=Resources(*data["largest"]),
            next_start=datetime.fromisoformat(start) if start else None,
            largest_by_type={str(k): int(v) for k, v in (data.get("largest_by_type") or {}).items()},
            free_by_type={str(k): int(v) for k, v in (data.get("free_by_type") or {}).items()},
        )


@dataclass(frozen=True)
class Node:
    """One usable node as a fabric reports it: its pools, and what it has and has free by GPU type."""

    name: str
    pools: tuple[str, ...]
    gpus: Mapping[str, int]  # type -> GPUs
    gpus_free: Mapping[str, int]  # type -> free GPUs
    free: Resources  # GPUs (milli), CPUs (milli), memory (MiB) free


def from_nodes(nodes: Iterable[Node], next_start: datetime | None = None) -> FreeNow:
    """The observation from usable nodes: pools per (pool name, GPU type), each node once in `free`."""
    pools: dict[tuple[str, str], list[int]] = {}
    free = largest = Resources()
    by_type: dict[str, int] = {}
    free_by_type: dict[str, int] = {}
    for node in nodes:
        free += node.free
        largest = Resources(
            max(largest.gpus_milli, node.free.gpus_milli),
            max(largest.cpus_milli, node.free.cpus_milli),
            max(largest.memory_mib, node.free.memory_mib),
        )
        for gpu_type, count in node.gpus.items():
            idle = max(0, min(count, node.gpus_free.get(gpu_type, 0)))
            by_type[gpu_type] = max(by_type.get(gpu_type, 0), idle)
            free_by_type[gpu_type] = free_by_type.get(gpu_type, 0) + idle
            for name in node.pools:
                entry = pools.setdefault((name, gpu_type), [0, 0, 0])
                entry[0] += count
                entry[1] += idle
                entry[2] += 1
    return FreeNow(
        pools=tuple(Pool(name, t, total, idle, n) for (name, t), (total, idle, n) in sorted(pools.items())),
        free=free,
        largest=largest,
        next_start=next_start,
        largest_by_type=by_type,
        free_by_type=free_by_type,
    )


def _triple(amount: Resources) -> list[int]:
    return [amount.gpus_milli, amount.cpus_milli, amount.memory_mib]


def _within(need: Resources, room: Resources) -> bool:
    return (
        need.gpus_milli <= room.gpus_milli and need.cpus_milli <= room.cpus_milli and need.memory_mib <= room.memory_mib
    )
