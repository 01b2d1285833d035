"""The baselines of `make bench submit`, served by the same gunicorn, the same worker settings and the same load
as the submit:

- `Echo`, a bare Django REST framework POST view that parses the JSON body and answers `{}`: the framework's floor.
- `Floor`, the echo that also records the body, one INSERT committed on its own (autocommit) into a table of the
  bench's own: the floor of any submit that answers only once what it took is durable. It has no token, no rate
  limit, no queue or team to check and no worker to admit it; how far the submit stays above it is what those cost.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

FLOOR_TABLE = "bench_floor"  # created by bench.bench_submit.floor_table(), outside the portal's migrations


class Echo(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    def post(self, request: Request) -> Response:
        request.data  # noqa: B018 (parse the body, as the submit does)
        return Response({})


class Floor(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    def post(self, request: Request) -> Response:
        with connection.cursor() as cursor:
            cursor.execute(f"INSERT INTO {FLOOR_TABLE} (body) VALUES (%s)", [json.dumps(request.data)])
        return Response({}, status=201)
