"""IT's what-if page: ask for a replay of the site's last days under a proposed change, watch it run, compare."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render

from portal import access
from portal.whatif import figures, services
from portal.whatif.models import WhatIfRun

RECENT = 10


def _it_only(request: HttpRequest) -> None:
    """IT's pages are absent for everyone else."""
    if not access.is_it(request.user):
        raise Http404("No such page.")


@login_required
def page(request: HttpRequest) -> HttpResponse:
    """The form and the recent runs; a valid request is queued and its page shown, an invalid one says why (400)."""
    _it_only(request)
    if request.method == "POST":
        bound, change = services.check_request(request.POST)
        if change is not None:
            run = services.do_request(request.user, bound.cleaned_data["days"], change)
            return redirect(run)
        form, status = bound, 400
    else:
        form, status = services.form(), 200
    runs = [(r, figures.describe(r.change)) for r in WhatIfRun.objects.select_related("requested_by")[:RECENT]]
    return render(request, "whatif/page.html", {"form": form, "runs": runs}, status=status)


@login_required
def run(request: HttpRequest, pk: int) -> HttpResponse:
    """One run: a progress bar that htmx refreshes until it is done, then the comparison and its charts."""
    _it_only(request)
    it = get_object_or_404(WhatIfRun, pk=pk)
    context: dict[str, object] = {"run": it, "change": figures.describe(it.change)}
    if it.state == WhatIfRun.State.DONE and it.result:
        result = it.result
        context |= {
            "columns": figures.columns(result),
            "metrics": figures.METRICS,
            "rows": figures.team_rows(result),
            "charts": [
                ("p95", "p95 wait per team", figures.p95_wait(result)),
                ("in-use", "GPUs in use over time", figures.in_use(result)),
                ("pending", "GPUs waiting over time", figures.in_use(result, "pending")),
            ],
        }
    partial = bool(getattr(request, "htmx", False)) and not request.htmx.boosted  # type: ignore[attr-defined]
    return render(request, "whatif/_run.html" if partial else "whatif/run.html", context)
