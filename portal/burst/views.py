"""The burst pages for IT, and the one agent call that carries no token yet: enrollment."""

from __future__ import annotations

from collections.abc import Mapping

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view, authentication_classes, permission_classes, throttle_classes
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from portal import access, known_fields
from portal.agents import fields as agent_fields
from portal.burst import enrollment, pages


@extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
@api_view(["POST"])
@authentication_classes([])
@permission_classes([AllowAny])
@throttle_classes([])
def enroll(request: Request) -> Response:
    """A burst instance's boot script trades its one-time token for its agent's own: 403 once spent or expired."""
    if not isinstance(request.data, Mapping):
        return Response({"errors": {"detail": ["Send a JSON object."]}}, status=400)
    unknown = known_fields.unknown_errors(request.data, agent_fields.ENROLL)
    if unknown:
        return Response({"errors": unknown}, status=400)
    token, host = request.data.get("token"), request.data.get("host")
    if not isinstance(token, str) or not isinstance(host, str) or not token or not host:
        return Response({"errors": {"token": ["Give the enrollment token and this host's name."]}}, status=400)
    try:
        instance, api_token = enrollment.redeem(token, host)
    except enrollment.Refused as refused:
        return Response({"errors": {"token": [str(refused)]}}, status=403)
    return Response({"token": api_token, "fabric": instance.pool.fabric.name, "host": instance.host_name})


@login_required
def it_burst(request: HttpRequest) -> HttpResponse:
    """IT's burst page: the full page, or its rows when htmx refreshes them."""
    if not access.is_it(request.user):
        raise Http404("No such page.")
    context = {"pages": pages.pool_pages(timezone.now())}
    partial = bool(getattr(request, "htmx", False)) and not request.htmx.boosted  # type: ignore[attr-defined]
    return render(request, "burst/_it_burst.html" if partial else "burst/it_burst.html", context)
