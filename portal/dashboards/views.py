"""Team dashboards. One view serves the full page or, when htmx asks, its partial."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils import timezone

from portal import access
from portal.dashboards import data, it


def _partial(request: HttpRequest) -> bool:
    return bool(getattr(request, "htmx", False)) and not request.htmx.boosted  # type: ignore[attr-defined]


@login_required
def index(request: HttpRequest) -> HttpResponse:
    """The teams whose dashboard the user may see; straight to it when there is only one."""
    groups = list(access.visible_groups(request.user))
    if len(groups) == 1:
        return redirect("dashboards:team", slug=groups[0].slug)
    return render(request, "dashboards/index.html", {"groups": groups})


@login_required
def team(request: HttpRequest, slug: str) -> HttpResponse:
    group = access.access_group(request.user, slug)
    window = data.window_of(request.GET.get("window"))
    dashboard = data.team_dashboard(group, window, timezone.now())
    context = {"d": dashboard, "windows": list(data.WINDOWS)}
    template = "dashboards/_team.html" if _partial(request) else "dashboards/team.html"
    return render(request, template, context)


def _it_only(request: HttpRequest) -> None:
    """IT's pages are absent for everyone else."""
    if not access.is_it(request.user):
        raise Http404("No such page.")


@login_required
def it_queues(request: HttpRequest) -> HttpResponse:
    _it_only(request)
    context = {"rows": it.queue_rows()}
    template = "dashboards/_it_queues.html" if _partial(request) else "dashboards/it_queues.html"
    return render(request, template, context)


@login_required
def it_fabrics(request: HttpRequest) -> HttpResponse:
    _it_only(request)
    context = {"rows": it.fabric_rows()}
    template = "dashboards/_it_fabrics.html" if _partial(request) else "dashboards/it_fabrics.html"
    return render(request, template, context)


@login_required
def it_capacity(request: HttpRequest) -> HttpResponse:
    _it_only(request)
    window = data.window_of(request.GET.get("window"))
    context = {"plans": it.capacity_plan(window, timezone.now()), "window": window, "windows": list(data.WINDOWS)}
    template = "dashboards/_it_capacity.html" if _partial(request) else "dashboards/it_capacity.html"
    return render(request, template, context)
