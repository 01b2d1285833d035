"""`GET /api/v1/departments/{slug}/usage/` (a department's teams side by side, portal.policy.departments) and
`GET /api/v1/groups/{slug}/standing/` (a team's fair-share standing, portal.policy.standing).

A department: IT, and the people of the department itself. A team's standing: whoever reads its usage (its
members and leads, IT, its own agents). Anyone else gets 404, as if it did not exist.
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
from portal.policy import departments, standing
from portal.usage import report

ANY = OpenApiResponse(OpenApiTypes.OBJECT)
PERIOD = ("from", "to", "days")


@extend_schema(
    summary="A department's teams side by side: reservations, limits, borrowing, GPU-hours and cost",
    parameters=[OpenApiParameter(p, OpenApiTypes.STR, description="As the team usage API takes it") for p in PERIOD],
    responses={200: ANY, 400: ANY, 404: ANY},
)
@api_view(["GET"])
def department_usage(request: Request, slug: str) -> Response:
    group = access.access_department(request.user, slug)
    unknown = sorted(set(request.query_params) - set(PERIOD))
    if unknown:
        return Response({"errors": {k: [f"Unknown parameter; give {', '.join(PERIOD)}."] for k in unknown}},
                        status=status.HTTP_400_BAD_REQUEST)  # fmt: skip
    period, errors = report.check_period(request.query_params, timezone.now())
    if period is None:
        return Response({"errors": errors}, status=status.HTTP_400_BAD_REQUEST)
    return Response(departments.department(group, period).shown())


@extend_schema(summary="A team's fair-share standing: U, L, terms of its waiting work, who goes first and why",
               responses={200: ANY, 404: ANY})  # fmt: skip
@api_view(["GET"])
def group_standing(request: Request, slug: str) -> Response:
    group = access.access_group_usage(request.user, slug)
    return Response(standing.standing(group, timezone.now()).shown())
