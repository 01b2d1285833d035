"""Helpers named by shape, for building scheduler snapshots in tests (Kueue/Armada style)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from fabrics.base import Resources
from scheduler import FabricState, Job, QueueState, Quota, Snapshot
from scheduler.model import UNLIMITED, TierState

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
VISION, FRAUD, NLP = 1, 2, 3
POOL, SPARE = 10, 11
TRAIN, SCAVENGE, BOTH = 1, 2, 3  # queues: train (POOL), scavenge (POOL, preemptible), both (POOL then SPARE)


def gpus(n: float, cpus: int = 1, memory_gb: int = 1) -> Resources:
    return Resources(round(n * 1000), cpus * 1000, memory_gb * 1024)


def gpu_jobs(
    group: int,
    n: int,
    each: float = 1,
    *,
    queue: int = TRAIN,
    priority: str = "normal",
    name: str = "",
    age_s: int = 0,
    runtime_s: int = 3600,
    nodes: int = 1,
    owner: int = 0,
) -> list[Job]:
    """n pending jobs of `each` GPUs per node, the first one oldest."""
    prefix = name or {VISION: "vision", FRAUD: "fraud", NLP: "nlp"}.get(group, str(group))
    return [
        Job(
            f"{prefix}-{i}",
            group,
            queue,
            gpus(each),
            nodes=nodes,
            priority=priority,
            submitted_at=NOW - timedelta(seconds=age_s + n - i),
            runtime_limit_s=runtime_s,
            owner_id=owner,
        )
        for i in range(n)
    ]


def running_on(fabric: int, jobs: list[Job], *, started_s_ago: int = 0) -> list[Job]:
    """The same jobs as already running on `fabric`, one a second, the last started `started_s_ago` seconds ago."""
    return [
        Job(
            j.id,
            j.group_id,
            j.queue_id,
            j.per_node,
            nodes=j.nodes,
            priority=j.priority,
            submitted_at=j.submitted_at,
            runtime_limit_s=j.runtime_limit_s,
            fabric_id=fabric,
            started_at=NOW - timedelta(seconds=started_s_ago + len(jobs) - 1 - i),
            owner_id=j.owner_id,
        )
        for i, j in enumerate(jobs)
    ]


def fabric(
    fid: int, n_gpus: float, *, healthy: bool = True, sharing: bool = True, declared_gpus: float | None = None
) -> FabricState:
    """A fabric with n_gpus up now; `declared_gpus`: what IT declared, when the fabric reports fewer."""
    return FabricState(
        fid,
        {POOL: "pool", SPARE: "spare"}.get(fid, f"f{fid}"),
        Resources(round(n_gpus * 1000), 10**6, 10**7),
        healthy,
        sharing,
        size=None if declared_gpus is None else Resources(round(declared_gpus * 1000), 10**6, 10**7),
    )


def reserve(group: int, fabric_id: int | None, n_gpus: float = 0, limit: float | None = None) -> Quota:
    cap = Resources(UNLIMITED if limit is None else round(limit * 1000), UNLIMITED, UNLIMITED)
    return Quota(group, fabric_id, reservation=Resources(round(n_gpus * 1000), 0, 0), limit=cap)


def queues(
    *, preemptible_train: bool = False, idle_preemptible_train: bool = False, train_share: int | None = None
) -> dict[int, QueueState]:
    return {
        TRAIN: QueueState(
            TRAIN, "train", (POOL,), preemptible_train, idle_preemptible=idle_preemptible_train, gpu_share=train_share
        ),
        SCAVENGE: QueueState(SCAVENGE, "scavenge", (POOL,), True),
        BOTH: QueueState(BOTH, "both", (POOL, SPARE)),
    }


def snapshot(
    fabrics: list[FabricState],
    pending: list[Job],
    running: Sequence[Job] = (),
    quotas: Sequence[Quota] = (),
    **extra: object,
) -> Snapshot:
    return Snapshot(
        now=NOW,
        fabrics={f.id: f for f in fabrics},
        queues=extra.pop("queues", None) or queues(),  # type: ignore[arg-type]
        pending=tuple(pending),
        running=tuple(running),
        quotas={(q.group_id, q.fabric_id): q for q in quotas},
        **extra,  # type: ignore[arg-type]
    )


def tiers(**extra: TierState) -> dict[str, TierState]:
    """The three tiers every site starts with (as their migration makes them), and any IT adds."""
    return {
        "low": TierState(0, rank=0),
        "normal": TierState(1, rank=1),
        "high": TierState(2, rank=2),
        **extra,
    }


URGENT = TierState(4, may_preempt=True, rank=3)  # IT's tier above high, allowed to preempt borrowed work
