"""`/api/v1/policy/`: the whole policy as one YAML document (GET), a plan of a document (POST plan/) and its
apply (POST apply/), for IT. A refusal names `section[key].field`; a stale document's version is a 409."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import permissions, status
from rest_framework.decorators import api_view, permission_classes
from rest_framework.request import Request
from rest_framework.response import Response

from portal.accounts import audit
from portal.policy import apply, changes, document, predict
from portal.policy.api import IsIT

ANY = OpenApiResponse(OpenApiTypes.OBJECT)
DEFAULT_DAYS = 30
MAX_DAYS = 90
FIELDS = {"document", "whatif_days"}


@extend_schema(summary="The whole policy as one YAML document (IT)", responses={200: ANY, 403: ANY})
@api_view(["GET"])
@permission_classes([permissions.IsAuthenticated, IsIT])
def export(request: Request) -> Response:
    policy = document.live()
    return Response({"version": document.version(policy), "document": document.write(policy)})


def _read(request: Request) -> tuple[str, int] | Response:
    body = request.data
    errors: dict[str, list[str]] = {}
    if not isinstance(body, dict):
        return Response({"errors": {"detail": ["Send a JSON object."]}}, status=status.HTTP_400_BAD_REQUEST)
    for name in sorted(set(body) - FIELDS):
        errors[str(name)] = [f"Unknown field; send {', '.join(sorted(FIELDS))}."]
    text = body.get("document")
    if not isinstance(text, str) or not text.strip():
        errors["document"] = ["Send the policy document's YAML text."]
    days = body.get("whatif_days", DEFAULT_DAYS)
    if isinstance(days, bool) or not isinstance(days, int) or not 0 <= days <= MAX_DAYS:
        errors["whatif_days"] = [f"A whole number of days from 0 (no prediction) to {MAX_DAYS}."]
    if errors:
        return Response({"errors": errors}, status=status.HTTP_400_BAD_REQUEST)
    return str(text), int(days)


def _refused(errors: dict[str, Any], code: int) -> Response:
    return Response({"errors": errors}, status=code)


@extend_schema(summary="What applying a policy document would change, and its predicted effect (IT)",
               request=OpenApiTypes.OBJECT, responses={200: ANY, 400: ANY, 403: ANY, 409: ANY})  # fmt: skip
@api_view(["POST"])
@permission_classes([permissions.IsAuthenticated, IsIT])
def plan(request: Request) -> Response:
    read = _read(request)
    if isinstance(read, Response):
        return read
    text, days = read
    try:
        return Response(predict.plan(text, days, timezone.now()))
    except document.Unreadable as error:
        return _refused(error.errors, status.HTTP_400_BAD_REQUEST)
    except changes.Refused as error:
        return _refused(error.errors, error.status)


@extend_schema(summary="Apply a policy document, all or nothing (IT)", request=OpenApiTypes.OBJECT,
               responses={200: ANY, 400: ANY, 403: ANY, 409: ANY})  # fmt: skip
@api_view(["POST"])
@permission_classes([permissions.IsAuthenticated, IsIT])
def apply_document(request: Request) -> Response:
    read = _read(request)
    if isinstance(read, Response):
        return read
    try:
        report, _ = apply.run(read[0], commit=True)
    except document.Unreadable as error:
        return _refused(error.errors, status.HTTP_400_BAD_REQUEST)
    except changes.Refused as error:
        return _refused(error.errors, error.status)
    if report["changes"]:
        audit.record("policy.applied", "policy", version=report["version"], after=report["after"],
                     changes=len(report["changes"]))  # fmt: skip
    return Response(report)
