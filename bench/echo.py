"""The framework's floor for `make bench submit`: a bare Django REST framework POST view that parses the JSON
body and answers `{}`, served by the same gunicorn, the same worker settings and the same load as the submit."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView


class Echo(APIView):
    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    def post(self, request: Request) -> Response:
        request.data  # noqa: B018 (parse the body, as the submit does)
        return Response({})
