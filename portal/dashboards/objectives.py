"""IT's wait objectives: the list (from each objective's last evaluation), and one objective's page (its figures
now, its burn, and what-if replays of a remedy with their predicted effect on it). Bounded queries: the list
reads one table; the page sums the wait slices in three queries, whatever the number of workloads."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone

from portal import access
from portal.accounts.models import Membership, ResourceGroup
from portal.dashboards import objective_figures
from portal.dashboards.views import _it_only
from portal.objectives.evaluate import measure, teams_of
from portal.objectives.models import WaitObjective
from portal.usage import waits
from portal.usage.rollup import hour_of, hours_between
from portal.whatif import figures as whatif_figures
from portal.whatif import services as whatif
from portal.whatif.models import WhatIfRun

RECENT = 5
COLUMNS = (("actual", "Actual"), ("current", "Current policy, replayed"), ("proposed", "With the remedy"))


@login_required
def objectives(request: HttpRequest) -> HttpResponse:
    """Every objective with its last evaluation: one query."""
    _it_only(request)
    rows = list(WaitObjective.objects.select_related("queue", "tier", "team"))
    return render(request, "dashboards/it_objectives.html", {"objectives": rows})


def may_view(user: Any, goal: WaitObjective) -> bool:
    """IT, and the leads of the teams the objective covers (who are told when it burns): one query for a lead."""
    if access.is_it(user):
        return True
    teams = ResourceGroup.objects.filter(teams_of(goal)).values("pk")
    return Membership.objects.filter(user=user, role=Membership.Role.LEAD, group__in=teams).exists()


@login_required
def objective(request: HttpRequest, slug: str) -> HttpResponse:
    """One objective, for IT and the leads of its teams; IT may POST a what-if of a remedy (quota, weight,
    capacity) measured on it. Absent (404) for anyone else, as IT's pages are."""
    goal = get_object_or_404(WaitObjective.objects.select_related("queue", "tier", "team"), slug=slug)
    if not may_view(request.user, goal) or (request.method == "POST" and not access.is_it(request.user)):
        raise Http404("No such page.")
    status = 200
    if not access.is_it(request.user):
        return render(request, "dashboards/it_objective.html", context(goal, None))
    if request.method == "POST":
        bound, change = whatif.check_request(request.POST)
        if change is not None:
            whatif.do_request(request.user, bound.cleaned_data["days"], change, objective=goal)
            return redirect(goal)
        form, status = bound, 400
    else:
        form = whatif.form()
        form.initial = {"days": goal.days, "kind": "quota"}
    return render(request, "dashboards/it_objective.html", context(goal, form), status=status)


def context(goal: WaitObjective, form: Any) -> dict[str, Any]:
    now = timezone.now()
    status = measure(goal, now)
    since = hour_of(now - timedelta(days=goal.days))
    per_hour = waits.hourly(goal.scope(), since, now)
    hours = list(hours_between(since, now))
    m = goal.threshold_minutes
    shares = [per_hour[h].share_over(m) if h in per_hour else None for h in hours]
    runs = [
        (run, whatif_figures.describe(run.change), _predicted(run))
        for run in WhatIfRun.objects.filter(objective=goal).order_by("-created_at")[:RECENT]
    ] if form is not None else []  # fmt: skip
    return {
        "goal": goal,
        "status": status,
        "budget_percent": round(goal.budget * 100, 2),
        "charts": [
            (
                "objective-hours",
                "Work that waited too long per hour",
                objective_figures.over_per_hour(hours, shares, goal.budget),
            ),
            ("objective-burn", "Burn rate per window", objective_figures.burn_rates(status.burn, status.thresholds)),
        ],
        "form": form,
        "for_it": form is not None,
        "runs": runs,
        "columns": COLUMNS,
    }


def _predicted(run: WhatIfRun) -> list[tuple[str, dict[str, Any] | None]]:
    """Per column (actual, current, with the remedy) the objective's figures, where the run has them."""
    found = (run.result or {}).get("objective") or {}
    return [(label, found.get(key)) for key, label in COLUMNS]
