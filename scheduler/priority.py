"""Fair share: the order in which pending work is considered.

P = w_age*ln(1+wait) + w_share*(1 - U/L) + w_qos*Q - w_size*(gpus/cluster_gpus) - w_runtime*ln(1+limit*gpus),
where U is the group's GPU use decayed over a half-life, L its allocation, Q its priority tier's weight
(model.TierState), limit the work's runtime limit in seconds and gpus the GPUs it holds (at least a tenth of
one: `work`). A group far over its share sinks (the share term is bounded below at -1, so age still lifts its
work eventually: nothing starves).

The runtime term puts smaller work first where the rest is equal: the mean wait of a busy line is lowest when
the work that frees its capacity soonest goes first, and what a job takes from the line is its GPUs for its
runtime, so the term reads the GPU-seconds its limit asks for (a one-GPU job by its limit alone, as before; a
gang of eight as eight times as long). Against age it reads as a response ratio: at the default weights (age
0.5, runtime 1) work that asks for k times the GPU-seconds passes just-submitted work once it has waited a
little over k^2 seconds (an 8-hour job passes fresh 10-minute work, k = 48, after about an hour and a quarter):
long work is not starved, it only needs to wait longer for the same place. Work within its team's unused
reservation does not wait on this order at all (owed.py): the order decides who borrows first. A runtime limit
is the user's own estimate (the queue's default where they give none), so the term orders only by what users
told the scheduler.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime

from scheduler.model import QOS, FabricState, Job, Quota, Snapshot


def decay(value: float, since: datetime, now: datetime, half_life_s: float) -> float:
    """Decayed use (GPU-seconds) brought from `since` to `now`: U(t) = U(t0) * 2^(-(t-t0)/half_life)."""
    return float(value * 0.5 ** (max(0.0, (now - since).total_seconds()) / half_life_s))


def average_gpus(decayed_gpu_seconds: float, since: datetime, now: datetime, half_life_s: float) -> float:
    """Decayed use read as the average number of GPUs held over recent half-lives (the U of fair share)."""
    return decay(decayed_gpu_seconds, since, now, half_life_s) * math.log(2) / half_life_s


def allocations(
    quotas: Mapping[tuple[int, int | None], Quota],
    fabrics: Mapping[int, FabricState],
    weights: Mapping[int, int],
    departments: Collection[int] = (),
) -> dict[int, float]:
    """Each team's allocation in GPUs (the L of fair share): its reservations, or else its weight's share of
    the GPUs nobody reserved. `weights`: every team's fair-share weight. `departments` take no share of their
    own: a department's reservation is its teams', and it runs no work itself."""
    total = sum(f.capacity.gpus_milli for f in fabrics.values()) / 1000
    reserved: dict[int, float] = {}
    weights = {g: w for g, w in weights.items() if g not in departments}
    for (group_id, fabric_id), quota in quotas.items():
        if fabric_id is not None and group_id not in departments:
            reserved[group_id] = reserved.get(group_id, 0.0) + quota.reservation.gpus_milli / 1000
    unreserved = max(0.0, total - sum(reserved.values()))
    weight_sum = sum(weights.values()) or 1
    return {g: max(reserved.get(g, 0.0), unreserved * w / weight_sum) for g, w in weights.items()}


class DecayedUse:
    """Each team's decayed GPU use, brought forward cycle by cycle with what runs, as the worker's usage step
    keeps it (portal/worker/usage.py): for the replays and the simulator, which have no worker. A team seen in
    use for the first time starts from nothing, its first interval uncounted."""

    def __init__(self, half_life_s: float) -> None:
        self.half_life_s = half_life_s
        self.decayed: dict[int, float] = {}  # team -> decayed GPU-seconds
        self.last: datetime | None = None

    def at(self, now: datetime, running: Iterable[Job]) -> dict[int, float]:
        """Each team's U at `now` (average GPUs), given the work that ran since the last call (`running`)."""
        if self.last is not None:
            in_use: defaultdict[int, int] = defaultdict(int)
            for job in running:
                in_use[job.group_id] += job.per_node.gpus_milli * job.nodes
            elapsed = max(0.0, (now - self.last).total_seconds())
            for g, value in self.decayed.items():
                self.decayed[g] = decay(value, self.last, now, self.half_life_s) + in_use.get(g, 0) / 1000 * elapsed
            for g in in_use:
                self.decayed.setdefault(g, 0.0)
        else:
            for job in running:
                self.decayed.setdefault(job.group_id, 0.0)
        self.last = now
        return {g: average_gpus(v, now, now, self.half_life_s) for g, v in self.decayed.items()}


# Work holds at least this much of a GPU in the runtime term (CPU-only work and small fractions alike), so
# that it still orders by its runtime limit.
LEAST_GPU_MILLI = 100


def work(limit_s: int, gpus_milli: int) -> float:
    """ln(1 + the GPU-seconds a runtime limit asks for): the runtime term's measure of a job (module docstring)."""
    return math.log1p(limit_s * max(gpus_milli, LEAST_GPU_MILLI) / 1000)


def share_term(usage: float, allocation: float) -> float:
    """1 - U/L, bounded to [-1, 1]; a group with no allocation counts as using twice its share once it uses any."""
    if allocation <= 0:
        return 1.0 if usage <= 0 else -1.0
    return max(-1.0, 1.0 - usage / allocation)


def ordered(snapshot: Snapshot) -> list[Job]:
    """Pending work, highest priority first; ties go to the older, then the smaller id (deterministic)."""
    return sorted(snapshot.pending, key=line_key(snapshot))


def line_key(snapshot: Snapshot) -> Callable[[Job], tuple[float, datetime, str]]:
    """The key ordered() sorts the snapshot's pending work by (lowest first). It also places one more job of a team
    the snapshot already has, pending or running, as ordered() would on the snapshot with that job."""
    w = snapshot.weights
    now = snapshot.now
    cluster_gpus = sum(f.capacity.gpus_milli for f in snapshot.fabrics.values()) / 1000 or 1.0
    groups = {j.group_id for j in snapshot.pending} | {j.group_id for j in snapshot.running}
    default_share = cluster_gpus / max(1, len(groups))
    fair = {g: w.share * share_term(snapshot.usage.get(g, 0.0), snapshot.shares.get(g, default_share)) for g in groups}
    # Q per tier, read once: IT's tiers over the old classes (which only a snapshot without tiers relies on).
    qos: dict[str, float] = {**QOS, **{slug: t.weight for slug, t in snapshot.tiers.items()}}

    # The terms that many jobs share (a tier's, a size's, a runtime limit's), each worked out once per call:
    # the same value, added in the same order, as computing it per job.
    tier_term: dict[str, float] = {}
    size_term: dict[int, float] = {}
    runtime_term: dict[tuple[int, int], float] = {}
    age_weight, log1p = w.age, math.log1p

    def key(job: Job) -> tuple[float, datetime, str]:
        submitted = job.submitted_at or now
        wait = max(0.0, (now - submitted).total_seconds())
        q = tier_term.get(job.priority)
        if q is None:
            q = tier_term[job.priority] = w.qos * qos.get(job.priority, 1)
        milli = job.per_node.gpus_milli * job.nodes
        size = size_term.get(milli)
        if size is None:
            size = size_term[milli] = w.size * (milli / 1000 / cluster_gpus)
        runtime = runtime_term.get((job.runtime_limit_s, milli))
        if runtime is None:
            runtime = runtime_term[job.runtime_limit_s, milli] = w.runtime * work(job.runtime_limit_s, milli)
        p = age_weight * log1p(wait) + fair[job.group_id] + q - size - runtime
        return (-p, submitted, job.id)

    return key
