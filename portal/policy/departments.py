"""A department's figures: its teams side by side against the department's reservation and limit, what each
holds now and borrows from (or leaves to) the others, and their GPU-hours and cost over a period.

Each team's figures are the ones its own usage API gives (portal.usage.report, from the hourly rollups); the
department's are the sums of its teams' (a department runs no work of its own), so the two always agree.
Borrowing: a team holding more than its reservation borrows the difference; one holding less leaves the rest
to the others. Within the department, what its teams borrow comes first out of what its other teams leave;
the rest comes from beyond it. Over a period, the GPU-hours a team held beyond its reservation, hour by hour.

Six queries whatever the number of teams or the period: the teams, their quotas, their usage, their
reservations, and what they hold now.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import F, Sum

from portal.accounts.models import ResourceGroup, combined_gpu_quota
from portal.queues.models import Quota
from portal.usage import report
from portal.usage.models import UsageRollup, UsageTeamRollup
from portal.usage.report import _figures as team_figures  # the team usage API's own figures and rounding
from portal.workloads.models import Workload
from portal.workloads.states import ACTIVE

ADDED = ("allocated_gpu_hours", "used_gpu_hours", "idle_gpu_hours", "unknown_gpu_hours", "cpu_hours",
         "memory_gb_hours", "cost", "idle_cost", "reserved_gpu_hours", "unused_reservation_gpu_hours",
         "pending_gpu_hours", "borrowed_gpu_hours")  # fmt: skip


@dataclass
class TeamRow:
    slug: str
    name: str
    reservation_milli: int
    limit_milli: int | None
    in_use_milli: int
    figures: dict[str, Any]

    @property
    def borrowing_milli(self) -> int:
        return max(0, self.in_use_milli - self.reservation_milli)

    @property
    def leaving_milli(self) -> int:
        return max(0, self.reservation_milli - self.in_use_milli)


@dataclass
class Department:
    slug: str
    name: str
    reservation_milli: int
    limit_milli: int | None
    period: report.Period
    teams: list[TeamRow] = field(default_factory=list)

    @property
    def in_use_milli(self) -> int:
        return sum(t.in_use_milli for t in self.teams)

    @property
    def borrowed_within_milli(self) -> int:
        """What its teams borrow from each other now: no more than the others leave."""
        return min(sum(t.borrowing_milli for t in self.teams), sum(t.leaving_milli for t in self.teams))

    @property
    def borrowed_beyond_milli(self) -> int:
        """What its teams hold now beyond the department's own reservation."""
        return max(0, self.in_use_milli - self.reservation_milli)

    @property
    def totals(self) -> dict[str, Any]:
        """The sums of its teams' figures (the idle share worked out again from the sums)."""
        sums: dict[str, Any] = {k: round(sum(t.figures[k] for t in self.teams), 4) for k in ADDED}
        for money in ("cost", "idle_cost"):
            sums[money] = round(sums[money], 2)
        known = sums["allocated_gpu_hours"] - sums["unknown_gpu_hours"]
        sums["idle_share"] = round(sums["idle_gpu_hours"] / known, 4) if known > 1e-9 else None
        return sums

    def shown(self) -> dict[str, Any]:
        """As the API answers it."""
        return {
            "department": self.slug,
            "from": self.period.start.isoformat(),
            "to": self.period.end.isoformat(),
            "gpu_reservation_milli": self.reservation_milli,
            "gpu_limit_milli": self.limit_milli,
            "now": {
                "in_use_milli": self.in_use_milli,
                "borrowed_within_milli": self.borrowed_within_milli,
                "borrowed_beyond_milli": self.borrowed_beyond_milli,
            },
            "totals": self.totals,
            "teams": [
                {
                    "team": t.slug,
                    "name": t.name,
                    "gpu_reservation_milli": t.reservation_milli,
                    "gpu_limit_milli": t.limit_milli,
                    "in_use_milli": t.in_use_milli,
                    "borrowing_milli": t.borrowing_milli,
                    "leaving_milli": t.leaving_milli,
                    **t.figures,
                }
                for t in self.teams
            ],
        }


def department(group: ResourceGroup, period: report.Period) -> Department:
    """The department's dashboard figures over the period (five queries)."""
    teams = list(ResourceGroup.objects.filter(parent=group).order_by("slug").values_list("pk", "slug", "name"))
    ids = [pk for pk, _, _ in teams]
    quotas: dict[int, list[Quota]] = {}
    for quota in Quota.objects.filter(group_id__in=[group.pk, *ids]).select_related("fabric"):
        quotas.setdefault(quota.group_id, []).append(quota)
    window = {"group_id__in": ids, "hour__gte": period.start, "hour__lt": period.end}
    sums = {f: Sum(f) for f in (*report.FIGURES, "pending_gpu_hours")}
    usage = {row.pop("group"): row for row in UsageRollup.objects.filter(**window).values("group").annotate(**sums)}
    held = {
        row.pop("group"): row
        for row in UsageTeamRollup.objects.filter(**window).values("group").annotate(
            reserved_gpu_hours=Sum("reserved_gpu_hours"), team_gpu_hours=Sum("gpu_hours"),
            unused_reservation_gpu_hours=Sum("unused_reservation_gpu_hours"))
    }  # fmt: skip
    now = dict(
        Workload.objects.filter(group_id__in=ids, state__in=ACTIVE)
        .values("group")
        .annotate(milli=Sum(F("gpus_milli") * F("nodes")))
        .values_list("group", "milli")
    )
    reservation, limit = combined_gpu_quota(quotas.get(group.pk, []))
    out = Department(group.slug, group.name, reservation, limit, period)
    for pk, slug, name in teams:
        team_reservation, team_limit = combined_gpu_quota(quotas.get(pk, []))
        out.teams.append(TeamRow(slug, name, team_reservation, team_limit, int(now.get(pk) or 0),
                                 _figures(usage.get(pk, {}), held.get(pk, {}))))  # fmt: skip
    return out


def _figures(usage: dict[str, Any], held: dict[str, Any]) -> dict[str, Any]:
    """A team's figures as its usage API gives them, and the GPU-hours it held beyond its reservation."""
    sums = {f: usage.get(f) for f in (*report.FIGURES, "pending_gpu_hours")}
    sums["reserved_gpu_hours"] = held.get("reserved_gpu_hours")
    sums["unused_reservation_gpu_hours"] = held.get("unused_reservation_gpu_hours")
    figures = team_figures(sums)
    # Each hour: held - (reserved - unused) = held beyond the reservation (unused is reserved - held, at least 0).
    within = (held.get("reserved_gpu_hours") or 0.0) - (held.get("unused_reservation_gpu_hours") or 0.0)
    figures["borrowed_gpu_hours"] = round(max(0.0, (held.get("team_gpu_hours") or 0.0) - within), 4)
    return figures
