"""The values the scheduler decides on: a frozen snapshot in, decisions out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from fabrics.base import Resources
from fabrics.live import FreeNow
from scheduler.reasons import Reason

# A limit component that is not set: larger than any fabric.
UNLIMITED = 1 << 62
NO_LIMIT = Resources(UNLIMITED, UNLIMITED, UNLIMITED)

# The three classes Gridlane had before IT defined its own tiers, and the Q each gives in the priority formula:
# what a tier the snapshot does not know counts as (simulations and tests that set no tiers).
QOS = {"high": 2, "normal": 1, "low": 0}


@dataclass(frozen=True, slots=True)
class TierState:
    """A priority tier IT defined: its Q in the priority formula, whether its work may preempt borrowed work of
    lower tiers (see preemption.py), and its rank (a higher rank is a higher tier; preemption goes by rank)."""

    weight: float
    may_preempt: bool = False
    rank: int = 0


def ranks(tiers: Mapping[str, TierState]) -> dict[str, int]:
    """Each tier's rank by slug, over the old classes' (which only a snapshot without those tiers relies on)."""
    return {**QOS, **{slug: t.rank for slug, t in tiers.items()}}


@dataclass(frozen=True)
class Weights:
    """P = age*ln(1+wait_s) + share*(1 - U/L) + qos*Q - size*(gpus/cluster_gpus) - runtime*ln(1+limit_s*gpus);
    configurable per deployment (priority.py says why each term is there; docs/it-guide.md why these defaults)."""

    age: float = 0.5
    share: float = 2.0
    qos: float = 3.0
    size: float = 1.0
    runtime: float = 1.0


@dataclass(frozen=True)
class FabricState:
    id: int
    name: str
    capacity: Resources  # what it has now: IT's declaration, lowered to what the fabric last reported
    healthy: bool = True
    gpu_sharing: bool = True  # False: a fraction of a GPU takes a whole one (no MIG or time slicing there)
    # What it holds in all when everything is up (IT's declaration); None: the same as `capacity`. Work larger
    # than `capacity` but within `size` waits for capacity instead of being told it can never run.
    size: Resources | None = None
    # The most nodes one workload may span here; None: no limit. An agent host runs one node's work, so a gang
    # never goes to an agent fabric (a burst pool included): it waits where all its nodes can start together.
    max_nodes: int | None = None


@dataclass(frozen=True)
class QueueState:
    id: int
    slug: str
    fabric_ids: tuple[int, ...]  # targets, in the order they are tried
    preemptible: bool = False  # work here may be preempted while it borrows another team's reservation
    idle_preemptible: bool = False  # work here whose GPUs sit idle may be preempted even within its reservation
    gpu_share: int | None = None  # percent of each target's GPUs this queue's work may hold at once (None: all)


@dataclass(frozen=True)
class Quota:
    """A group's floor and cap on one fabric, or on all fabrics together when fabric_id is None."""

    group_id: int
    fabric_id: int | None
    reservation: Resources = Resources()  # noqa: RUF009 (frozen, so one shared instance is safe)
    limit: Resources = NO_LIMIT


@dataclass(frozen=True, slots=True)
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
    owner_id: int = 0
    only_on: tuple[int, ...] | None = None  # native work: the fabrics of its kind; None: any of its queue's targets
    array_id: str = ""  # an array's element: its parent's id
    array_throttle: int = 0  # at most this many of the array's elements hold capacity at once (0: no limit)
    gpus_idle: bool = False  # its GPUs sit idle now (the idle-GPU step warned its owner, and has not taken it back)
    gpu_type: str = ""  # the GPU type it asks for (h100, a100...); "": any (scheduler/soonest.py)

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
    quotas: Mapping[tuple[int, int | None], Quota] = field(default_factory=dict)  # by (group_id, fabric_id)
    usage: Mapping[int, float] = field(default_factory=dict)  # group -> decayed GPUs in use (the U of fair share)
    shares: Mapping[int, float] = field(default_factory=dict)  # group -> its allocation in GPUs (the L)
    owner_limits: Mapping[int, int] = field(default_factory=dict)  # service identity -> GPU limit (milli)
    owner_reservations: Mapping[int, int] = field(default_factory=dict)  # service identity -> GPUs owed it (milli)
    member_limits: Mapping[int, int] = field(default_factory=dict)  # team -> GPUs one person may hold (milli)
    agents: frozenset[int] = frozenset()  # owners that are service identities (a member cap is for people)
    parents: Mapping[int, int] = field(default_factory=dict)  # team -> its department (a group with a quota too)
    weights: Weights = Weights()
    tiers: Mapping[str, TierState] = field(default_factory=dict)  # Job.priority -> its tier; empty: the old classes
    # What fabrics that keep queues of their own have free now, where their answer is fresh (fabrics/live.py);
    # empty: every fabric is planned with its declaration alone (scheduler/soonest.py).
    live: Mapping[int, FreeNow] = field(default_factory=dict)
    # Learned runtimes by shape (scheduler/estimates.py shape_of): how long such work has really run, in seconds.
    # Estimated starts use them instead of the runtime limit; admission and backfill never do. Empty: limits only.
    expected_runtimes: Mapping[tuple[int, int, int, int, int], int] = field(default_factory=dict)
    # Work held because a budget over it is spent (held.py): (team, owner) -> why; owner 0 holds all the team's
    # work, and team 0 an owner's work in any team (an agent identity's budget).
    held: Mapping[tuple[int, int], Reason] = field(default_factory=dict)

    def quota(self, group_id: int, fabric_id: int | None) -> Quota:
        """The group's quota on the fabric; no quota means no floor and no cap beyond the fabric."""
        return self.quotas.get((group_id, fabric_id)) or Quota(group_id, fabric_id)


@dataclass(frozen=True, slots=True)
class Admit:
    job_id: str
    fabric_id: int


@dataclass(frozen=True, slots=True)
class Preempt:
    job_id: str
    reason: Reason


@dataclass(frozen=True, slots=True)
class Waiting:
    job_id: str
    reason: Reason
    estimated_start: datetime | None = None
    position: int = 0  # its place among the waiting work of its queue, in line order (1: next)


@dataclass(frozen=True)
class Decisions:
    admit: tuple[Admit, ...] = ()
    waiting: tuple[Waiting, ...] = ()
    preempt: tuple[Preempt, ...] = ()
