"""Fair share: the order in which pending work is considered.

P = w_age*ln(1+wait) + w_share*(1 - U/L) + w_qos*Q - w_size*(gpus/cluster_gpus), where U is the group's
GPU use decayed over a half-life, L its allocation and Q its priority tier's weight (model.TierState).
A group far over its share sinks (the share term is bounded below at -1, so age still lifts its work
eventually: nothing starves).
"""

from __future__ import annotations

import math
from datetime import datetime

from scheduler.model import QOS, Job, Snapshot


def share_term(usage: float, allocation: float) -> float:
    """1 - U/L, bounded to [-1, 1]; a group with no allocation counts as using twice its share once it uses any."""
    if allocation <= 0:
        return 1.0 if usage <= 0 else -1.0
    return max(-1.0, 1.0 - usage / allocation)


def ordered(snapshot: Snapshot) -> list[Job]:
    """Pending work, highest priority first; ties go to the older, then the smaller id (deterministic)."""
    w = snapshot.weights
    now = snapshot.now
    cluster_gpus = sum(f.capacity.gpus_milli for f in snapshot.fabrics.values()) / 1000 or 1.0
    groups = {j.group_id for j in snapshot.pending} | {j.group_id for j in snapshot.running}
    default_share = cluster_gpus / max(1, len(groups))
    fair = {g: w.share * share_term(snapshot.usage.get(g, 0.0), snapshot.shares.get(g, default_share)) for g in groups}
    # Q per tier, read once: IT's tiers over the old classes (which only a snapshot without tiers relies on).
    qos: dict[str, float] = {**QOS, **{slug: t.weight for slug, t in snapshot.tiers.items()}}

    def key(job: Job) -> tuple[float, datetime, str]:
        submitted = job.submitted_at or now
        wait = max(0.0, (now - submitted).total_seconds())
        gpus = job.per_node.gpus_milli * job.nodes / 1000
        p = (
            w.age * math.log1p(wait)
            + fair[job.group_id]
            + w.qos * qos.get(job.priority, 1)
            - w.size * (gpus / cluster_gpus)
        )
        return (-p, submitted, job.id)

    return sorted(snapshot.pending, key=key)
