"""Setting a budget: IT sets any; a team's lead sets its members' and agents' within the team's own (the team's
own budget is IT's). check_* validates (ValidationError by field, PermissionDenied for who may not), do_* saves,
audits (the model's audit signal) and counts the budget's spend at once, so that raising a spent budget releases
its work at the very next admission, without waiting for the budget step."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from portal import access
from portal.accounts import audit
from portal.budgets import holds, spend
from portal.budgets.models import Budget


def may_set(user: Any, budget: Budget) -> bool:
    """IT sets any budget; a lead of the team sets its members' and agents' budgets."""
    if access.is_it(user):
        return True
    return budget.user_id is not None and access.is_lead_of(user, budget.team_id)


def check_set(user: Any, budget: Budget) -> None:
    if not may_set(user, budget):
        if budget.user_id is None and access.is_lead_of(user, budget.team_id):
            raise ValidationError(
                {"user": ["The team's own budget is set by IT; a lead sets its members' and agents'."]}
            )
        raise PermissionDenied("IT, or a lead of the team for its members and agents, sets budgets.")
    budget.full_clean()


def do_set(user: Any, budget: Budget, now: datetime) -> Budget:
    """Save the budget (checked again under a lock on its team, so that a team's budget and a member's set at once
    cannot pass each other's check), then count its spend and hold or release its scope's work now."""
    with transaction.atomic(), audit.acting_as(user):
        from portal.accounts.models import ResourceGroup

        ResourceGroup.objects.select_for_update().filter(pk=budget.team_id).first()
        budget.full_clean()
        budget.set_by = user if getattr(user, "is_authenticated", False) else None
        budget.updated_at = now
        budget.save()
        refresh(budget, now)
        holds.sweep()  # raised: its work is back in the line for the next admission
    return budget


def refresh(budget: Budget, now: datetime) -> None:
    """Count one budget's spend now and keep it, with its hold (two queries)."""
    s = spend.spent([budget], now)[budget.pk]
    budget.spent_gpu_hours, budget.spent_cost, budget.spent_at = s.gpu_hours, s.cost, now
    budget.held_reason = spend.held_words(budget, s, now)
    Budget.objects.filter(pk=budget.pk).update(
        spent_gpu_hours=s.gpu_hours, spent_cost=s.cost, spent_at=now, held_reason=budget.held_reason
    )
