"""What each budget's scope spent in its window, from the hourly rollups the chargeback reads (never raw samples):
a team's from UsageRollup, a member's from UsageMemberRollup in that team, an agent identity's from
UsageMemberRollup in any team. Each is counted once where it happened: a member's spend is part of the team's
(the same hours, seen from the team), never added to it. The rollup step recomputes the current hour up to now,
so running work's use counts to its last step (GRIDLANE_ROLLUP_SECONDS).

`spent` answers for any number of budgets in two queries at most (one per rollup table it needs)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import reduce
from operator import or_

from django.db.models import Q, Sum

from portal.budgets.models import Budget, amount
from portal.usage.models import UsageMemberRollup, UsageRollup

WITHIN, WARNING, SPENT = "within", "warning", "spent"


@dataclass(frozen=True)
class Spent:
    gpu_hours: float
    cost: float


def spent(budgets: Iterable[Budget], now: datetime) -> dict[int, Spent]:
    """Each budget's spend in its window at `now`, by the budget's id (two queries at most)."""
    team_q: list[Q] = []
    member_q: list[Q] = []
    budgets = list(budgets)
    for b in budgets:
        start, end = b.window_at(now)
        hours = Q(hour__gte=start, hour__lt=end)
        if b.scope == Budget.Scope.TEAM:
            team_q.append(hours & Q(group_id=b.team_id))
        elif b.scope == Budget.Scope.MEMBER:
            member_q.append(hours & Q(group_id=b.team_id, user_id=b.user_id))
        else:
            member_q.append(hours & Q(user_id=b.user_id))
    teams: dict[int, Spent] = {}
    if team_q:
        rows = (
            UsageRollup.objects.filter(reduce(or_, team_q))
            .order_by()
            .values("group_id")
            .annotate(g=Sum("gpu_hours"), c=Sum("cost"))
            .values_list("group_id", "g", "c")
        )
        teams = {group: Spent(g or 0.0, c or 0.0) for group, g, c in rows}
    members: dict[tuple[int, int], Spent] = {}
    if member_q:
        by_member = (
            UsageMemberRollup.objects.filter(reduce(or_, member_q))
            .order_by()
            .values("group_id", "user_id")
            .annotate(g=Sum("gpu_hours"), c=Sum("cost"))
            .values_list("group_id", "user_id", "g", "c")
        )
        members = {(group, user): Spent(g or 0.0, c or 0.0) for group, user, g, c in by_member}
    none = Spent(0.0, 0.0)
    out: dict[int, Spent] = {}
    for b in budgets:
        if b.scope == Budget.Scope.TEAM:
            out[b.pk] = teams.get(b.team_id, none)
        elif b.scope == Budget.Scope.MEMBER:
            out[b.pk] = members.get((b.team_id, b.user_id or 0), none)
        else:  # an agent identity: its spend in whatever team it ran under
            found = [s for (_, user), s in members.items() if user == b.user_id]
            out[b.pk] = Spent(sum(s.gpu_hours for s in found), sum(s.cost for s in found))
    return out


def percent(b: Budget, s: Spent) -> float:
    """The larger share of the budget spent, GPU-hours or money, in percent (only what the budget sets)."""
    shares = []
    if b.gpu_hours is not None:
        shares.append(100.0 * s.gpu_hours / float(b.gpu_hours))
    if b.money is not None:
        shares.append(100.0 * s.cost / float(b.money))
    return max(shares, default=0.0)


def state(b: Budget, share: float) -> str:
    if share >= 100.0:
        return SPENT
    reached = [t for t in b.thresholds or () if t <= share]
    return WARNING if reached else WITHIN


def held_words(b: Budget, s: Spent, now: datetime) -> str:
    """Why its scope's new work waits, when the budget is spent; "" when it is not."""
    over = []
    if b.gpu_hours is not None and s.gpu_hours >= float(b.gpu_hours):
        over.append(("GPU-hour", f"{hours(s.gpu_hours)} of {hours(b.gpu_hours)} GPU-h"))
    if b.money is not None and s.cost >= float(b.money):
        over.append(("money", f"{amount(s.cost, '')} of {amount(b.money, '')}"))
    if not over:
        return ""
    kind, figures = over[0]
    whose = {
        Budget.Scope.TEAM: "the team's",
        Budget.Scope.MEMBER: f"{b.user.username if b.user else 'your'}'s",
        Budget.Scope.AGENT: f"the agent {b.user.username if b.user else ''}'s",
    }[Budget.Scope(b.scope)]
    text = (
        f"held: {whose} {kind} budget in {b.team.slug} for {b.window_label(now)} is spent ({figures}); "
        "a lead or IT can raise it"
    )
    return text[:300]


def hours(value: float | Decimal) -> str:
    """ "1,000", "12.5": GPU-hours to a tenth."""
    return f"{float(value):,.1f}".removesuffix(".0")
