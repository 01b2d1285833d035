"""My workloads' filters and its multi-select Cancel.

Filters are an allowlist read from the query string: `show` (all, active: waiting or running, waiting,
running, finished) and `queue` (a queue's slug); anything else is ignored, never passed to the ORM. A cancel of
several workloads goes one by one through the same check and service as the workload page's Cancel, and only
reaches work the person may see (access.visible_workloads): an id they may not see is skipped as unknown.
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from portal import access
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import FINISHED, State

SHOW = {
    "all": "All",
    "active": "Waiting or running",
    "waiting": "Waiting",
    "running": "Running",
    "finished": "Finished",
}
MAX_CANCEL = 200  # the most one click cancels (the list shows 100)


def filters_of(request: HttpRequest) -> dict[str, str]:
    """The list's filters from the query string, each checked against what it may be."""
    show = request.GET.get("show", "all")
    queue = request.GET.get("queue", "")
    return {
        "show": show if show in SHOW else "all",
        "queue": queue if queue and access.usable_queues(request.user).filter(slug=queue).exists() else "",
    }


def apply(workloads: QuerySet[Workload], chosen: dict[str, str]) -> QuerySet[Workload]:
    show = chosen["show"]
    if show == "active":
        workloads = workloads.exclude(state__in=FINISHED)
    elif show == "waiting":
        workloads = workloads.filter(state=State.PENDING)
    elif show == "running":
        workloads = workloads.filter(state=State.RUNNING)
    elif show == "finished":
        workloads = workloads.filter(state__in=FINISHED)
    if chosen["queue"]:
        workloads = workloads.filter(queue__slug=chosen["queue"])
    return workloads


def query(scope: str, chosen: dict[str, str]) -> str:
    """The list's own query string for these filters (the live refresh and the way back after a cancel)."""
    return urlencode({"scope": scope, **{k: v for k, v in chosen.items() if v and v != "all"}})


def context(request: HttpRequest, scope: str, chosen: dict[str, str]) -> dict[str, Any]:
    queues = access.usable_queues(request.user).order_by("name").values_list("slug", "name")
    return {"filters": chosen, "show_choices": SHOW.items(), "queue_choices": list(queues),
            "list_query": query(scope, chosen)}  # fmt: skip


@login_required
@require_POST
def cancel_many(request: HttpRequest) -> HttpResponse:
    """Cancel the ticked workloads (`ids`), each as its own Cancel would; back to the list, saying how many."""
    ids = request.POST.getlist("ids")[:MAX_CANCEL]
    back = reverse("workloads:list") + "?" + request.POST.get("back", "")
    if not ids:
        messages.error(request, "Tick the workloads to cancel first.")
        return redirect(back)
    found = access.visible_workloads(request.user).filter(pk__in=_uuids(ids))
    cancelled, refused = 0, 0
    for workload in found:
        if workload.finished:
            continue
        try:
            services.check_cancel(request.user, workload)
        except PermissionDenied:
            refused += 1
            continue
        services.do_cancel(request.user, workload)
        cancelled += 1
    said = f"Cancelled {cancelled} workload{'' if cancelled == 1 else 's'}."
    if refused:
        said += f" {refused} you may not cancel (another member's) were left as they are."
    messages.success(request, said)
    return redirect(back)


def _uuids(values: list[str]) -> list[str]:
    out = []
    for value in values:
        try:
            out.append(str(uuid.UUID(value)))
        except ValueError:
            continue
    return out
