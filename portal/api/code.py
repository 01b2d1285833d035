"""Code bundles (portal.code): a team's content-addressed uploads, and a job fetching its own.

`HEAD /api/v1/code/<sha256>/?group=<team>`: 200 when the team has the bundle, else 404 (both say the site's size
cap in `Gridlane-Code-Max-Bytes`); `GET` the same, with the bytes. `PUT` with the .tar.gz as the body: 201 kept,
200 the team had it already, 400 not those bytes or not an archive a node may unpack, 413 over the cap. Without
`group` the caller's only team; a team that is not the caller's is a 400, and another team's bundle is as absent
as one never uploaded.

`GET /api/v1/workloads/<id>/code/` with `Authorization: Bearer <the workload's secret>`: its bundle, for its job
(fabrics.travel.node); 404 for a wrong secret, a finished workload, or one without a bundle.
"""

from __future__ import annotations

import io
from typing import Any
from uuid import UUID

from django.http import FileResponse, HttpResponseBase
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.decorators import api_view, authentication_classes, parser_classes, permission_classes
from rest_framework.exceptions import NotFound
from rest_framework.parsers import BaseParser
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from portal.code import services, store

CAP_HEADER = "Gridlane-Code-Max-Bytes"


class BundleParser(BaseParser):
    """Names the body's type for the schema; the view reads the stream itself (request.data is never read)."""

    media_type = "*/*"

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        return {}


@extend_schema(
    summary="A team's code bundle, by its sha256: look it up (HEAD), fetch it (GET) or upload it (PUT)",
    parameters=[OpenApiParameter("group", OpenApiTypes.STR, description="The team (default: your only one)")],
    request={"application/octet-stream": OpenApiTypes.BINARY},  # the .tar.gz (sent as application/gzip too)
    responses={
        200: OpenApiResponse(description="The team has it (GET: its bytes)."),
        201: OpenApiResponse(description="Uploaded and kept."),
        400: OpenApiResponse(description="Not the bytes named, not a safe .tar.gz, or not your team."),
        404: OpenApiResponse(description="The team has no such bundle."),
        413: OpenApiResponse(description="Larger than the site's cap, packed or unpacked."),
    },
)
@api_view(["GET", "HEAD", "PUT"])
@parser_classes([BundleParser])
def bundle(request: Request, digest: str) -> HttpResponseBase:
    headers = {CAP_HEADER: str(store.cap())}
    try:
        services.check_digest(digest)
        team = services.team_for(request.user, request.query_params.get("group"))
    except services.Rejected as rejected:
        return Response({"errors": rejected.errors}, status=status.HTTP_400_BAD_REQUEST, headers=headers)
    if request.method == "PUT":
        try:
            declared = int(request.META.get("CONTENT_LENGTH") or 0) or None
        except ValueError:
            declared = None
        try:
            created = services.do_upload(request.user, team, digest, request.stream or io.BytesIO(), declared)
        except store.TooLarge as large:
            return Response({"errors": {"detail": [str(large)]}}, status=413, headers=headers)
        except store.Unfit as unfit:
            return Response({"errors": {"detail": [str(unfit)]}}, status=400, headers=headers)
        answer = {"digest": digest, "group": team.slug, "created": created}
        return Response(answer, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK, headers=headers)
    path = services.fetchable(team, digest)
    if path is None:
        return Response({"errors": {"detail": ["Not found."]}}, status=404, headers=headers)
    if request.method == "HEAD":
        return Response(status=status.HTTP_200_OK, headers=headers | {"Content-Length": str(path.stat().st_size)})
    return FileResponse(open(path, "rb"), content_type="application/gzip", headers=headers)


@extend_schema(
    summary="A job fetches its workload's code bundle (authenticated by the workload's own secret)",
    responses={
        200: OpenApiResponse(description="The bundle's bytes (application/gzip)."),
        404: OpenApiResponse(description="No such workload, not its secret, finished, or no bundle."),
    },
    auth=[],
)
@api_view(["GET"])
@authentication_classes([])
@permission_classes([AllowAny])
def workload_code(request: Request, pk: UUID) -> HttpResponseBase:
    path = services.job_bundle(pk, request.headers.get("Authorization", ""))
    if path is None:
        raise NotFound()
    return FileResponse(open(path, "rb"), content_type="application/gzip")
