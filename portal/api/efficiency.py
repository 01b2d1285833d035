"""`GET /api/v1/workloads/{id}/efficiency/`: how a workload used what it held (portal.usage.efficiency), for
`gridlane stats`. Its owner, its team's leads and IT read it; anyone else gets 404, as if it did not exist."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from portal import access
from portal.accounts import scopes
from portal.usage.efficiency import efficiency, with_sampler


@extend_schema(
    summary="A workload's efficiency: GPU use per GPU, time held against time used, idle spells, actions taken",
    responses={
        200: OpenApiResponse(OpenApiTypes.OBJECT, description="The summary (unknown figures are null)."),
        404: OpenApiResponse(description="No such workload, or not one whose efficiency the caller may read."),
    },
)
@api_view(["GET"])
def workload_efficiency(request: Request, pk: UUID) -> Response:
    workload = access.access_efficiency(request.user, pk, annotate=with_sampler)
    if scopes.queues_of(request.auth) is not None:  # a token limited to some queues reads work in those only
        scopes.check_queue(request.auth, workload.queue.slug, scopes.READ)
    window = timedelta(minutes=settings.GRIDLANE_IDLE_WINDOW_MINUTES)
    return Response(efficiency(workload, timezone.now(), window).summary())
