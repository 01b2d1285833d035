"""The guides at /docs/: the README as the index, a page per document in docs/, their images. Open to everyone
(a guide helps before the first sign-in and holds nothing of any team's); rendering rules in render.py."""

from __future__ import annotations

from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render as render_template
from django.urls import reverse
from django.views.decorators.http import require_safe

from portal.docs import render


@require_safe
def index(request: HttpRequest) -> HttpResponse:
    return _page(request, None)


@require_safe
def page(request: HttpRequest, name: str) -> HttpResponse:
    return _page(request, name)


@require_safe
def image(request: HttpRequest, name: str) -> FileResponse:
    path = render.image(name)
    if path is None:
        raise Http404("No such image.")
    response = FileResponse(path.open("rb"), content_type="image/png")
    response["Cache-Control"] = "public, max-age=3600"
    return response


def _page(request: HttpRequest, name: str | None) -> HttpResponse:
    path = render.source(name)
    if path is None:
        raise Http404("No such document.")
    doc = render.page(path, reverse("docs:index"))
    context = {"doc": doc, "name": name, "documents": render.documents()}
    return render_template(request, "docs/page.html", context)
