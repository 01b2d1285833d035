"""Fair-share standing, as Slurm's sshare and sprio give it: each team's decayed use (U), allocation (L) and share
term, each pending workload's priority with its terms, and why a team's work waits behind another's.

The inputs are the ones the admission cycle reads (portal.worker.snapshot: fabrics at their planned capacity,
quotas with grants, the team tree, decayed use, weights, tiers) and the terms are worked out by the scheduler's
own functions (scheduler.priority), in the order priority.ordered adds them:

    P = age*ln(1+wait_s) + share*(1 - U/L) + qos*Q - size*(gpus/cluster_gpus) - runtime*ln(1+limit_s*gpus)

A member's decayed use is read from the hourly member rollups with the same half-life (the scheduler shares by
team, so it is shown for reading only). Another team's work is shown as terms only: never its names or ids.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q

from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric
from portal.usage.models import UsageMemberRollup
from portal.worker import snapshot
from portal.worker.capacity import planned
from portal.worker.models import GroupUsage
from portal.workloads.models import Workload
from portal.workloads.states import ACTIVE, State
from scheduler import model
from scheduler.priority import average_gpus, share_term, work

TERMS = ("age", "share", "qos", "size", "runtime")
FORMULA = "P = age*ln(1+wait_s) + share*(1 - U/L) + qos*Q - size*(gpus/cluster_gpus) - runtime*ln(1+limit_s*gpus)"
MOST_PENDING = 5000  # the oldest pending workloads read (age lifts the oldest first)
TOP = 5  # teams ahead shown, reasons per team
MEMBER_HALF_LIVES = 8  # a member's use older than this many half-lives weighs under 0.4 %


@dataclass(frozen=True)
class Terms:
    """One pending workload's priority and its terms, each already weighted (the size and runtime terms are
    subtracted: shown here as the negative numbers they add)."""

    age: float
    share: float
    qos: float
    size: float
    runtime: float

    @property
    def priority(self) -> float:
        return self.age + self.share + self.qos + self.size + self.runtime

    def shown(self) -> dict[str, float]:
        return {**{t: round(getattr(self, t), 4) for t in TERMS}, "priority": round(self.priority, 4)}


@dataclass
class TeamStanding:
    slug: str
    name: str
    fair_share_weight: int
    usage_gpus: float  # U
    allocation_gpus: float  # L
    share_term: float  # w_share * (1 - U/L), bounded
    pending: int = 0
    best: Terms | None = None

    def shown(self) -> dict[str, Any]:
        return {
            "team": self.slug,
            "fair_share_weight": self.fair_share_weight,
            "usage_gpus": round(self.usage_gpus, 4),
            "allocation_gpus": round(self.allocation_gpus, 4),
            "share_term": round(self.share_term, 4),
            "pending": self.pending,
            "best_pending": self.best.shown() if self.best else None,
        }


@dataclass
class Standing:
    now: datetime
    weights: model.Weights
    half_life_hours: float
    cluster_gpus: float
    team: TeamStanding
    teams: list[TeamStanding]
    members: list[tuple[str, float]] = field(default_factory=list)
    own: list[tuple[Any, Terms]] = field(default_factory=list)  # (workload id, name) and its terms, best first
    ahead: list[dict[str, Any]] = field(default_factory=list)

    def shown(self) -> dict[str, Any]:
        w = self.weights
        return {
            "at": self.now.isoformat(),
            "formula": FORMULA,
            "weights": {"age": w.age, "share": w.share, "qos": w.qos, "size": w.size, "runtime": w.runtime},
            "half_life_hours": self.half_life_hours,
            "cluster_gpus": self.cluster_gpus,
            "team": self.team.shown(),
            "teams": [t.shown() for t in self.teams],
            "members": [{"member": m, "usage_gpus": round(u, 4)} for m, u in self.members],
            "pending": [{"id": str(i), "name": n, **t.shown()} for (i, n), t in self.own],
            "ahead": self.ahead,
        }


def standing(group: ResourceGroup, now: datetime) -> Standing:
    """The team's standing among every team's now."""
    w = snapshot.weights()
    half_life_s = settings.GRIDLANE_FAIR_SHARE_HALF_LIFE_HOURS * 3600
    fabrics = {
        f.pk: model.FabricState(f.pk, f.name, planned(f, now), f.healthy, f.gpu_sharing, size=f.capacity)
        for f in Fabric.objects.filter(enabled=True)
    }
    quotas = snapshot.with_grants(snapshot.quota_states(fabrics), snapshot.active_grants(now, fabrics))
    tree = snapshot.group_tree()
    allocation = snapshot.shares(quotas, fabrics, tree)
    usage = {
        g: average_gpus(seconds, at, now, half_life_s)
        for g, seconds, at in GroupUsage.objects.values_list("group_id", "decayed_gpu_seconds", "updated_at")
    }
    cluster_gpus = sum(f.capacity.gpus_milli for f in fabrics.values()) / 1000 or 1.0
    rows = list(
        Workload.objects.filter(Q(state=State.PENDING, array_size=0) | Q(state__in=ACTIVE))
        .order_by("submitted_at")
        .values_list("id", "name", "group_id", "state", "priority", "submitted_at", "gpus_milli", "nodes",
                     "runtime_limit_s")[:MOST_PENDING]
    )  # fmt: skip
    # priority.ordered: the groups with work waiting or holding capacity; one with no allocation gets an equal part.
    default_share = cluster_gpus / max(1, len({r[2] for r in rows}))
    qos = {**model.QOS, **{slug: t.weight for slug, t in snapshot.tier_states().items()}}
    teams: dict[int, TeamStanding] = {}
    for team_id, slug, name, weight in ResourceGroup.objects.order_by("slug").values_list(
        "pk", "slug", "name", "fair_share_weight"
    ):
        u, share = usage.get(team_id, 0.0), allocation.get(team_id, default_share)
        teams[team_id] = TeamStanding(slug, name, weight, u, share, w.share * share_term(u, share))
    own: list[tuple[Any, Terms]] = []
    for pk, name, group_id, state, tier, submitted, gpus_milli, nodes, limit_s in rows:
        if state != State.PENDING or group_id not in teams:
            continue
        wait = max(0.0, (now - (submitted or now)).total_seconds())
        terms = Terms(
            age=w.age * math.log1p(wait),
            share=teams[group_id].share_term,
            qos=w.qos * qos.get(tier, 1),
            size=-(w.size * (gpus_milli * nodes / 1000 / cluster_gpus)),
            runtime=-(w.runtime * work(limit_s, gpus_milli * nodes)),
        )
        team = teams[group_id]
        team.pending += 1
        if team.best is None or terms.priority > team.best.priority:
            team.best = terms
        if group_id == group.pk:
            own.append(((pk, name), terms))
    own.sort(key=lambda item: -item[1].priority)
    mine = teams[group.pk]
    found = Standing(
        now, w, half_life_s / 3600, cluster_gpus, mine, sorted(teams.values(), key=_by_share), own=own[:50]
    )
    found.members = members(group, now, half_life_s)
    found.ahead = ahead(mine, list(teams.values()))
    return found


def _by_share(team: TeamStanding) -> tuple[float, str]:
    return (-team.share_term, team.slug)


def members(group: ResourceGroup, now: datetime, half_life_s: float) -> list[tuple[str, float]]:
    """Each member's decayed use in average GPUs, from the hourly rollups (one query), most first."""
    since = now - timedelta(seconds=half_life_s * MEMBER_HALF_LIVES)
    decayed: defaultdict[str, float] = defaultdict(float)
    for username, hour, gpu_hours in UsageMemberRollup.objects.filter(group=group, hour__gte=since).values_list(
        "user__username", "hour", "gpu_hours"
    ):
        end = min(now, hour + timedelta(hours=1))
        decayed[username] += gpu_hours * 3600 * 0.5 ** (max(0.0, (now - end).total_seconds()) / half_life_s)
    out = [(m, average_gpus(v, now, now, half_life_s)) for m, v in decayed.items()]
    return sorted(out, key=lambda m: (-m[1], m[0]))


WHY = {
    "share": "it has used less of its fair share than yours (U/L)",
    "qos": "its work is at a higher priority tier",
    "age": "its work has waited longer",
    "size": "yours asks for more GPUs",
    "runtime": "yours has a longer runtime limit",
}


def ahead(mine: TeamStanding, teams: list[TeamStanding]) -> list[dict[str, Any]]:
    """The teams whose best waiting work comes before this team's best, most ahead first, each with the terms in
    which it leads (largest gap first)."""
    if mine.best is None:
        return []
    out: list[dict[str, Any]] = []
    for team in teams:
        if team is mine or team.best is None or team.best.priority <= mine.best.priority:
            continue
        gaps = sorted(((getattr(team.best, t) - getattr(mine.best, t), t) for t in TERMS), reverse=True)
        reasons = [{"term": t, "by": round(gap, 4), "why": WHY[t]} for gap, t in gaps if gap > 1e-9][:TOP]
        out.append({"team": team.slug, "by": round(team.best.priority - mine.best.priority, 4), "reasons": reasons})
    return sorted(out, key=lambda a: (-float(a["by"]), str(a["team"])))[:TOP]
