"""Where a job may go and what it needs there: its route, worked out once per shape of work in a cycle.

Two pending jobs of the same shape (queue, native fabrics, nodes and request per node) have the same targets,
the same need on each and the same least need: a cycle works a route out once per shape, and the passes that
remember what a shape found (reservations.py) name it by its Shape, never by an object's identity.
"""

from __future__ import annotations

from typing import NamedTuple

from scheduler.ledger import Amount, need_on
from scheduler.model import Job, QueueState, Snapshot


class Shape(NamedTuple):
    """The fields that make two requests interchangeable to the scheduler. A Shape is a tuple: it hashes and
    compares as the plain tuple of its fields, in this order, so a memo keyed by Shapes is read with that tuple."""

    queue_id: int
    only_on: tuple[int, ...] | None
    nodes: int
    gpus_milli: int
    cpus_milli: int
    memory_mib: int


def shape_of(job: Job) -> Shape:
    r = job.per_node
    return Shape(job.queue_id, job.only_on, job.nodes, r.gpus_milli, r.cpus_milli, r.memory_mib)


class Route(NamedTuple):
    """A job's targets in its queue's order, each with its need there; empty where its queue is gone or has no
    target for it. `least`: the least it needs on any of its targets (below its need on a target without GPU
    sharing only where some target shares GPUs); read only where it has targets."""

    shape: Shape
    targets: tuple[tuple[int, Amount], ...]
    least: Amount


class Routes:
    """Each shape's route, made on first sight and kept for the cycle."""

    __slots__ = ("_sharing", "_snapshot", "known")

    def __init__(self, snapshot: Snapshot, sharing: dict[int, bool]) -> None:
        self._snapshot = snapshot
        self._sharing = sharing  # fabric -> whether it shares GPUs (the ledger's)
        # Shape -> its route. Read with the plain tuple of a Shape's fields (equal to the Shape), so that a pass
        # makes no Shape for a shape seen before.
        self.known: dict[tuple[object, ...], Route] = {}

    def of(self, job: Job) -> Route:
        """The job's route (empty targets where its queue is gone)."""
        r = job.per_node
        route = self.known.get((job.queue_id, job.only_on, job.nodes, r.gpus_milli, r.cpus_milli, r.memory_mib))
        if route is None:
            route = self.known[shape_of(job)] = self._make(job)
        return route

    def _make(self, job: Job) -> Route:
        shape = shape_of(job)
        queue = self._snapshot.queues.get(job.queue_id)
        if queue is None:
            return Route(shape, (), (0, 0, 0))
        shared = need_on(job, True)
        whole = need_on(job, False) if job.per_node.gpus_milli % 1000 else shared
        sharing = self._sharing
        fids = targets(job, queue, self._snapshot)
        least = shared if any(sharing[fid] for fid in fids) else whole
        return Route(shape, tuple((fid, shared if sharing[fid] else whole) for fid in fids), least)


def targets(job: Job, queue: QueueState, snapshot: Snapshot) -> tuple[int, ...]:
    """The fabrics a job may go to, in its queue's order: native work only to fabrics of its kind, a gang only to
    fabrics that run that many nodes for one workload."""
    fids = queue.fabric_ids if job.only_on is None else tuple(f for f in queue.fabric_ids if f in job.only_on)
    if job.nodes > 1:
        fids = tuple(f for f in fids if _spans(snapshot, f, job.nodes))
    return fids


def _spans(snapshot: Snapshot, fid: int, nodes: int) -> bool:
    fabric = snapshot.fabrics.get(fid)
    return fabric is None or fabric.max_nodes is None or nodes <= fabric.max_nodes
