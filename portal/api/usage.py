"""`GET /api/v1/groups/{slug}/usage/?from=&to=&by=member|queue|fabric`: what a team's compute came to.

Members and leads of the team, IT, and the team's own agents read it (portal.access); anyone else gets
404, as if the team did not exist. The figures come from the rollups (portal.usage.report), in a
fixed number of queries whatever the period; beside them the team's budgets (portal.budgets.shown: one query), each
with what it spent in its own window, the share spent and its state (within, warning, spent).
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from portal import access
from portal.budgets import shown
from portal.usage import report


@extend_schema(
    summary="A team's GPU-hours (allocated, used, idle, unknown) and their cost over a period",
    parameters=[
        OpenApiParameter(
            "from", OpenApiTypes.STR, description="ISO date or date-time (with a zone); default: `days` ago"
        ),
        OpenApiParameter("to", OpenApiTypes.STR, description="ISO date or date-time; default: the end of this hour"),
        OpenApiParameter(
            "days", OpenApiTypes.INT, description=f"Without `from`: this many days (default {report.DEFAULT_DAYS})"
        ),
        OpenApiParameter(
            "by", OpenApiTypes.STR, enum=list(report.BY), description="One row per member, queue or fabric"
        ),
    ],
    responses={
        200: OpenApiResponse(OpenApiTypes.OBJECT, description="Totals, and rows where `by` asks for them."),
        400: OpenApiResponse(description="A parameter is wrong."),
        404: OpenApiResponse(description="No such team, or not one the caller may see."),
    },
)
@api_view(["GET"])
def group_usage(request: Request, slug: str) -> Response:
    group = access.access_group_usage(request.user, slug)
    period, errors = report.check_period(request.query_params, timezone.now())
    if period is None:
        return Response({"errors": errors}, status=status.HTTP_400_BAD_REQUEST)
    # The team's budgets beside the figures: each one's window is its own, whatever period was asked for.
    budgets = [b.as_dict() for b in shown.team_budgets(group, timezone.now())]
    return Response(report.team_usage(group, period) | {"budgets": budgets})
