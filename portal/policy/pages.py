"""The department dashboard and fair-share standing pages; the same figures as their API answers."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from portal import access
from portal.policy import departments, standing
from portal.usage import report

DAYS = ("7", "30", "90")


@login_required
def department_index(request: HttpRequest) -> HttpResponse:
    return render(request, "policy/departments.html", {"departments": list(access.visible_departments(request.user))})


@login_required
def department(request: HttpRequest, slug: str) -> HttpResponse:
    group = access.access_department(request.user, slug)
    days = str(request.GET.get("days") or "") if request.GET.get("days") in DAYS else DAYS[0]
    period, _ = report.check_period({"days": days}, timezone.now())
    assert period is not None  # noqa: S101 (one of DAYS: always a period)
    d = departments.department(group, period)
    return render(request, "policy/department.html", {"d": d, "days": days, "choices": DAYS})


@login_required
def team_standing(request: HttpRequest, slug: str) -> HttpResponse:
    group, lead = access.access_group_led(request.user, slug)
    found = standing.standing(group, timezone.now())
    return render(request, "policy/standing.html", {"s": found, "team": group, "lead": lead})
