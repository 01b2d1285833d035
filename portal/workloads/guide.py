"""What the new-workload form shows beside its fields: each queue's rules, the room it has now and the team's
headroom, like a quota view. Read in a fixed number of queries whatever the number of queues."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import F, Sum

from fabrics.registry import fabric_class
from portal import access, words
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, Quota
from portal.words import duration
from portal.workloads import calibration, limits
from portal.workloads.models import Workload
from portal.workloads.states import ACTIVE


@dataclass(frozen=True)
class QueueGuide:
    slug: str
    name: str
    description: str
    kinds: str  # "training run, batch job"
    runtime: str  # "default 1 h, at most 7 d"
    largest: str  # the biggest single request: "8 GPUs, 64 CPUs, 512 GB on one node"
    free: str  # room now over its fabrics: "6 of 8 GPUs free"
    headroom: list[str]  # per team of the person's: "vision: 2 of 4 GPUs in use, 2 GPUs more may start"
    warning: str  # "no fabric behind it": nothing submitted here can run
    estimates: str = ""  # how good its estimated starts were lately: "off by 4 min (median), ..." (calibration)


def queue_guide(user: Any, queues: Sequence[Queue]) -> list[QueueGuide]:
    """Five queries: the GPUs in use per fabric, the person's teams (with the GPUs their temporary grants add
    now on each fabric), their quotas and what each holds per fabric, and the queues' recent estimate errors (the
    queues come with their targets and teams, prefetched by the form). A grant raises the team's limit on its
    fabric as the submit's check does."""
    if not queues:
        return []
    fabrics_of = _fabrics_of(queues)
    fabric_ids = {f.pk for fs in fabrics_of.values() for f in fs}
    in_use = {
        fabric_id: (g or 0, c or 0, m or 0)
        for fabric_id, g, c, m in Workload.objects.filter(state__in=ACTIVE, fabric_id__in=fabric_ids)
        .values("fabric_id")
        .annotate(
            g=Sum(F("gpus_milli") * F("nodes")),
            c=Sum(F("cpus_milli") * F("nodes")),
            m=Sum(F("memory_mib") * F("nodes")),
        )
        .values_list("fabric_id", "g", "c", "m")
    }
    teams = list(
        ResourceGroup.objects.filter(pk__in=access.member_group_ids(user))
        .annotate(**limits.grant_columns(fabric_ids, "pk"))
        .prefetch_related("quotas")
    )
    team_use: defaultdict[tuple[int, int], int] = defaultdict(int)
    for group_id, fabric_id, g in (
        Workload.objects.filter(state__in=ACTIVE, group__in=teams)
        .values("group_id", "fabric_id")
        .annotate(g=Sum(F("gpus_milli") * F("nodes")))
        .values_list("group_id", "fabric_id", "g")
    ):
        team_use[(group_id, fabric_id or 0)] += g or 0
    allowed = {q.pk: {g.pk for g in q.allowed_groups.all()} for q in queues}
    calibrated = calibration.queue_calibrations(q.pk for q in queues)
    guides = []
    for q in queues:
        fabrics = fabrics_of[q.pk]
        guides.append(
            QueueGuide(
                slug=q.slug,
                name=q.name,
                description=q.description,
                kinds=", ".join(words.kind_label(k).lower() for k in q.kinds),
                runtime=_runtime(q),
                largest=_largest(fabrics),
                free=_free(fabrics, in_use),
                headroom=[
                    _headroom(t, fabrics, list(t.quotas.all()), team_use) for t in teams if t.pk in allowed[q.pk]
                ],
                warning="" if fabrics else "No fabric serves this queue yet: work sent here cannot run. Ask IT.",
                estimates=calibration.calibration_words(calibrated.get(q.pk)),
            )
        )
    return guides


def _runtime(q: Queue) -> str:
    return f"default {duration(q.default_runtime_minutes * 60)}, at most {duration(q.max_runtime_minutes * 60)}"


def _fabrics_of(queues: Sequence[Queue]) -> dict[int, list[Fabric]]:
    """The enabled fabrics behind each queue, from the targets the form prefetched (enabled fabrics only)."""
    return {q.pk: [t.fabric for t in q.targets.all() if t.fabric.enabled] for q in queues}


def _largest(fabrics: list[Fabric]) -> str:
    if not fabrics:
        return ""
    big = max(fabrics, key=lambda f: (f.gpus_milli, f.cpus_milli, f.memory_mib))
    nodes = getattr(fabric_class(big.kind), "MAX_NODES", None)
    where = " on one node" if nodes == 1 else ""
    return (
        f"{words.gpus(big.gpus_milli / 1000)}, {words.cpus(big.cpus_milli / 1000)}, "
        f"{words.number(big.memory_mib / 1024, 0)} GB{where}"
    )


def _free(fabrics: list[Fabric], in_use: dict[int, tuple[int, int, int]]) -> str:
    """GPUs free now over the queue's fabrics, and CPUs and memory beside them (often what runs out first)."""
    if not fabrics:
        return ""
    none = (0, 0, 0)
    total = sum(f.gpus_milli for f in fabrics)
    free = sum(max(0, f.gpus_milli - in_use.get(f.pk, none)[0]) for f in fabrics)
    cpus = sum(max(0, f.cpus_milli - in_use.get(f.pk, none)[1]) for f in fabrics)
    mib = sum(max(0, f.memory_mib - in_use.get(f.pk, none)[2]) for f in fabrics)
    return (
        f"{words.number(free / 1000)} of {words.gpus(total / 1000)} free now, "
        f"with {words.cpus(cpus / 1000)} and {words.number(mib / 1024, 0)} GB memory"
    )


def _headroom(team: ResourceGroup, fabrics: list[Fabric], quotas: list[Quota], use: dict[tuple[int, int], int]) -> str:
    """A team's room on a queue: the most more it may start on one of the queue's fabrics now, its temporary
    grants there included (each raises the cap on its fabric, as portal.workloads.limits.cap_read does)."""
    total_use = sum(g for (gid, _), g in use.items() if gid == team.pk)
    overall = next((q.gpu_limit_milli for q in quotas if q.fabric_id is None), None)
    rooms = []
    for fabric in fabrics:
        cap = limits.cap_on(fabric, quotas).gpus_milli
        if cap < limits.NO_CAP:
            here = total_use if overall is not None and cap == overall else use.get((team.pk, fabric.pk), 0)
            granted = limits.granted_on(team, fabric.pk)
            rooms.append((cap + granted - here, cap, granted))
    in_use = f"{team.name}: {words.gpus(total_use / 1000)} in use"
    if not rooms:
        return f"{in_use}; no team limit here"
    room, cap, granted = max(rooms)
    extra = f" + {words.number(granted / 1000)} granted" if granted else ""
    return f"{in_use}, limit {words.gpus(cap / 1000)}{extra}: room for {words.gpus(max(0, room) / 1000)} more"
