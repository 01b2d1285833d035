"""Held work leaves the admission's slice: once a cycle has told a pending workload that its budget is spent
(reason code `budget_spent`), the snapshot's candidates leave it out (portal.worker.snapshot), so that a member's or
an agent's held backlog never crowds the rest of its team out of the slice each cycle considers. `sweep` gives
such work back to the line once no hold covers it any longer (the budget raised, deleted, or its window over):
one statement, run by every budget step and by every save of a budget."""

from __future__ import annotations

from functools import reduce
from operator import or_

from django.db.models import Q

from portal.budgets.models import Budget
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler.reasons import BUDGET_SPENT


def covered() -> Q | None:
    """The pending work the budgets hold now, as a filter (one query); None where none is held."""
    scopes = []
    for scope, team_id, user_id in Budget.objects.exclude(held_reason="").values_list("scope", "team_id", "user_id"):
        if scope == Budget.Scope.TEAM:
            scopes.append(Q(group_id=team_id))
        elif scope == Budget.Scope.AGENT:
            scopes.append(Q(owner_id=user_id))
        else:
            scopes.append(Q(group_id=team_id, owner_id=user_id))
    return reduce(or_, scopes) if scopes else None


def sweep() -> int:
    """Give back to the line the work told it was held that no hold covers now (two queries); how many."""
    marked = Workload.objects.filter(state=State.PENDING, pending_reason_code=BUDGET_SPENT)
    held = covered()
    if held is not None:
        marked = marked.exclude(held)
    return marked.update(pending_reason_code="", pending_reason="")
