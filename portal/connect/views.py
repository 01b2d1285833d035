"""The connect path under a server without the proxy (WSGI: the test server, gunicorn's sync workers): the
same answers as the proxy for who may pass, and, for those who may, a page saying what serves it. And the
owner's switch that shares a workload's server with the team."""

from __future__ import annotations

from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from portal import access
from portal.connect import sharing


def without_proxy(request: HttpRequest, pk: UUID | str) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if access.connectable_workload(request.user, pk) is None:
        raise Http404("No such workload.")
    body = "The portal runs without its connect proxy here: serve it with portal.asgi (see README.md)."
    return HttpResponse(body, status=503, content_type="text/plain; charset=utf-8")


@login_required
@require_POST
def share(request: HttpRequest, pk: UUID) -> HttpResponse:
    """The owner shares the workload's server with the team (`shared=1`) or stops (`shared=0`)."""
    workload = access.access_workload(request.user, pk)
    try:
        sharing.check_share(request.user, workload)
    except PermissionDenied:
        return HttpResponse("Only its owner may share a workload's server.", status=403)
    if request.POST.get("shared") not in ("0", "1"):
        return HttpResponse("Send shared=1 to share with the team, shared=0 to stop.", status=400)
    shared = request.POST["shared"] == "1"
    sharing.do_share(request.user, workload, shared)
    if request.htmx:  # type: ignore[attr-defined]
        from portal.workloads.views import workload_detail

        return workload_detail(request, pk)
    messages.success(request, "Shared with your team." if shared else "No longer shared with your team.")
    return redirect(workload)
