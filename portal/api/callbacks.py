"""Calls from jobs, not people: a job reports where its web server listens (a notebook's Jupyter, or an app), and a
job's sampler reports how busy its GPUs are (`POST /api/v1/workloads/<id>/samples/`, portal.usage.samples:
204 kept, 400 not nvidia-smi's output, 404 as below, 409 not starting or running, 429 too soon).

`POST /api/v1/workloads/<id>/endpoint/` with `Authorization: Bearer <the workload's secret>` and
`{"host": "node17.hpc.example.org", "port": 8888, "token": "..."}` (portal.workloads.notebook_endpoint).
No user or API token is involved: the secret speaks for one run of one workload. A wrong secret and
an unknown workload get the same 404; 400 names the fields that are wrong; 409 says the workload
takes no report now (not starting or running); 204 on success. The browser then reaches the server through
the portal's connect path (portal.connect), never directly.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import api_view, authentication_classes, parser_classes, permission_classes
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.parsers import JSONParser
from portal.connect import server_reach
from portal.usage import samples as usage_samples
from portal.workloads import notebook_endpoint


class EndpointIn(serializers.Serializer[Any]):
    host = serializers.CharField(help_text="The compute node's name or address, as the portal reaches it.")
    port = serializers.IntegerField(min_value=1, max_value=65535)
    token = serializers.CharField(
        required=False, help_text="The server's token (a notebook's Jupyter: required): 16 to 256 URL-safe characters."
    )
    label = serializers.CharField(  # type: ignore[assignment]  # a field named as Field's own attribute
        required=False, help_text='An app\'s name on its button, e.g. "TensorBoard".'
    )
    path = serializers.CharField(required=False, help_text='Where it serves from: "/" (default) or its connect path.')


@extend_schema(
    summary="A job reports its web server, a notebook's or an app's (authenticated by the workload's own secret)",
    request=EndpointIn,
    responses={
        204: OpenApiResponse(description="The server is kept; the workload page links to it."),
        400: OpenApiResponse(description="A field is wrong."),
        404: OpenApiResponse(description="No such workload, or not its secret."),
        409: OpenApiResponse(description="The workload takes no report now."),
    },
    auth=[],
)
@api_view(["POST"])
@authentication_classes([])
@permission_classes([AllowAny])
@parser_classes([JSONParser])
def endpoint(request: Request, pk: UUID) -> Response:
    workload = notebook_endpoint.reporter(pk, request.headers.get("Authorization", ""))
    if workload is None:
        raise NotFound()
    found, errors = notebook_endpoint.check_report(request.data, pk)
    if found is None:
        return Response({"errors": errors}, status=status.HTTP_400_BAD_REQUEST)
    unreachable = server_reach.problem(workload, found.endpoint)  # on the fabric's own nodes only
    if unreachable:
        return Response({"errors": {"host": [unreachable]}}, status=status.HTTP_400_BAD_REQUEST)
    try:
        notebook_endpoint.do_report(workload, found)
    except notebook_endpoint.Refused as refused:
        return Response({"errors": {"detail": [str(refused)]}}, status=status.HTTP_409_CONFLICT)
    return Response(status=status.HTTP_204_NO_CONTENT)


class SamplesParser(JSONParser):
    max_bytes = 262_144  # 120 readings of a node of 16 GPUs, many times over


NVIDIA_SMI_HELP = (
    "The output of `nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader,nounits`, "
    "as printed: one line per GPU."
)


class ReadingIn(serializers.Serializer[Any]):
    age = serializers.IntegerField(min_value=0, help_text="Whole seconds before the post that it was taken.")
    nvidia_smi = serializers.CharField(help_text=NVIDIA_SMI_HELP)


class SampleIn(serializers.Serializer[Any]):
    nvidia_smi = serializers.CharField(required=False, help_text=NVIDIA_SMI_HELP + " One reading, taken now.")
    readings = ReadingIn(many=True, required=False, help_text="Several readings (instead of nvidia_smi), up to 120.")


@extend_schema(
    summary="A job's sampler reports its GPUs' utilisation (authenticated by the workload's own secret)",
    request=SampleIn,
    responses={
        204: OpenApiResponse(description="The readings that are due are kept."),
        400: OpenApiResponse(description="A reading is not nvidia-smi's output as asked for."),
        404: OpenApiResponse(description="No such workload, or not its secret."),
        409: OpenApiResponse(description="The workload neither starts nor runs."),
        413: OpenApiResponse(description="The body is too large."),
        429: OpenApiResponse(description="Every reading is too soon after the last sample (Retry-After)."),
    },
    auth=[],
)
@api_view(["POST"])
@authentication_classes([])
@permission_classes([AllowAny])
@parser_classes([SamplesParser])
def samples(request: Request, pk: UUID) -> Response:
    workload = usage_samples.sampled_by(pk, request.headers.get("Authorization", ""), usage_samples.node_of(request))
    if workload is None:
        usage_samples.count("unknown")
        raise NotFound()
    taken, errors = usage_samples.check_sample(request.data)
    if taken is None:
        usage_samples.count("rejected")
        return Response({"errors": errors}, status=status.HTTP_400_BAD_REQUEST)
    try:
        usage_samples.do_sample(workload, taken, timezone.now())
    except usage_samples.Refused as refused:
        usage_samples.count("refused")
        return Response({"errors": {"detail": [str(refused)]}}, status=status.HTTP_409_CONFLICT)
    except usage_samples.TooSoon as soon:
        usage_samples.count("limited")
        return Response({"errors": {"detail": [str(soon)]}}, status=429, headers={"Retry-After": str(soon.retry_after)})
    # Accepted samples are not counted apart: they are the samples table, and one counter row updated by every
    # sample of every job would be a row all web processes wait on.
    return Response(status=status.HTTP_204_NO_CONTENT)
