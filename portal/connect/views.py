"""The connect path under a server without the proxy (WSGI: the test server, gunicorn's sync workers): the
same answers as the proxy for who may pass, and, for those who may, a page saying what serves it."""

from __future__ import annotations

from uuid import UUID

from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse

from portal import access


def without_proxy(request: HttpRequest, pk: UUID | str) -> HttpResponse:
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if access.connectable_workload(request.user, pk) is None:
        raise Http404("No such workload.")
    body = "The portal runs without its connect proxy here: serve it with portal.asgi (see README.md)."
    return HttpResponse(body, status=503, content_type="text/plain; charset=utf-8")
