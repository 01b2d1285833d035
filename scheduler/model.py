"""The values the scheduler decides on: a frozen snapshot in, decisions out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from fabrics.base import Resources
from scheduler.reasons import Reason

# A limit component that is not set: larger than any fabric.
UNLIMITED = 1 << 62
NO_LIMIT = Resources(UNLIMITED, UNLIMITED, UNLIMITED)

# Priority classes and their QoS weight, highest first.
QOS = {"high": 2, "normal": 1, "low": 0}


@dataclass(frozen=True)
class FabricState:
    id: int
    name: str
    capacity: Resources
    healthy: bool = True


@dataclass(frozen=True)
class QueueState:
    id: int
    slug: str
    fabric_ids: tuple[int, ...]  # targets, in the order they are tried
    preemptible: bool = False


@dataclass(frozen=True)
class Quota:
    group_id: int
    fabric_id: int
    reservation: Resources = Resources()  # noqa: RUF009 (frozen, so one shared instance is safe)
    limit: Resources = NO_LIMIT


@dataclass(frozen=True)
class Job:
    """A workload as the scheduler sees it: pending, or holding capacity on `fabric_id`."""

    id: str
    group_id: int
    queue_id: int
    per_node: Resources
    nodes: int = 1
    priority: str = "normal"
    submitted_at: datetime | None = None
    runtime_limit_s: int = 3600
    fabric_id: int | None = None
    started_at: datetime | None = None

    @property
    def total(self) -> Resources:
        return self.per_node.times(self.nodes)


@dataclass(frozen=True)
class Snapshot:
    now: datetime
    fabrics: Mapping[int, FabricState]
    queues: Mapping[int, QueueState]
    pending: tuple[Job, ...] = ()
    running: tuple[Job, ...] = ()  # everything that holds capacity: admitted, dispatching, running, cancelling
    quotas: Mapping[tuple[int, int], Quota] = field(default_factory=dict)  # by (group_id, fabric_id)

    def quota(self, group_id: int, fabric_id: int) -> Quota:
        """The group's quota on the fabric; no quota means no floor and no cap beyond the fabric."""
        return self.quotas.get((group_id, fabric_id)) or Quota(group_id, fabric_id)


@dataclass(frozen=True)
class Admit:
    job_id: str
    fabric_id: int


@dataclass(frozen=True)
class Waiting:
    job_id: str
    reason: Reason
    estimated_start: datetime | None = None


@dataclass(frozen=True)
class Decisions:
    admit: tuple[Admit, ...] = ()
    waiting: tuple[Waiting, ...] = ()
