"""A team's budgets as the team dashboard and the usage API show them: each scope's budget, what it spent in its
window as the last budget step counted it, the share spent and its state (one query)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings

from portal.accounts.models import ResourceGroup
from portal.budgets import spend
from portal.budgets.models import Budget


@dataclass(frozen=True)
class Shown:
    budget: Budget
    start: datetime
    end: datetime
    window: str  # "December 2026", "2026-12-01 to 2026-12-15"
    percent: float
    state: str  # within, warning, spent

    @property
    def who(self) -> str:
        return self.budget.user.username if self.budget.user else "the team"

    def as_dict(self) -> dict[str, Any]:
        b = self.budget
        return {
            "scope": b.scope,
            "user": b.user.username if b.user else None,
            "window": {"kind": b.window, "label": self.window, "from": self.start, "to": self.end},
            "gpu_hours": float(b.gpu_hours) if b.gpu_hours is not None else None,
            "money": float(b.money) if b.money is not None else None,
            "currency": settings.GRIDLANE_CURRENCY,
            "spent_gpu_hours": round(b.spent_gpu_hours, 3),
            "spent_cost": round(b.spent_cost, 2),
            "percent": round(self.percent, 1),
            "state": self.state,
            "held": b.held_reason,
            "thresholds": b.thresholds,
            "counted_at": b.spent_at,
        }


def team_budgets(team: ResourceGroup, now: datetime) -> list[Shown]:
    """The team's own budget first, then its members' and agents' (one query). Figures counted in an earlier
    window than now's (the step has not run since it turned) show nothing spent yet."""
    out = []
    for b in Budget.objects.filter(team=team).select_related("user").order_by("scope", "user__username"):
        start, end = b.window_at(now)
        if b.spent_at is None or b.spent_at < start:
            b.spent_gpu_hours = b.spent_cost = 0.0
        share = spend.percent(b, spend.Spent(b.spent_gpu_hours, b.spent_cost))
        out.append(Shown(b, start, end, b.window_label(now), share, spend.state(b, share)))
    out.sort(key=lambda s: s.budget.scope != Budget.Scope.TEAM)
    return out
