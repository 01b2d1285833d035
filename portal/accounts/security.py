"""Response headers that Django's SecurityMiddleware does not set."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase


class SecurityHeadersMiddleware:
    """A Content-Security-Policy that forbids framing, plugins and foreign <base> (scripts stay as they are)."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        response: HttpResponseBase = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", settings.GRIDLANE_CONTENT_SECURITY_POLICY)
        response.headers.setdefault("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
        return response
