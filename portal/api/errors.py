"""Every API error has one shape: `{"errors": {field: [message, ...]}}`; errors without a field use "detail"."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from portal.api.text_check import FieldParseError


def flatten(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error detail as dotted field names: {"resources": {"gpus": [..]}} -> {"resources.gpus": [..]}."""
    if isinstance(detail, dict):
        out: dict[str, list[str]] = {}
        for key, value in detail.items():
            name = "detail" if key in ("non_field_errors", "detail") and not prefix else f"{prefix}{key}"
            for field, messages in flatten(value, f"{name}.").items():
                out.setdefault(field, []).extend(messages)
        return out
    field = prefix.rstrip(".") or "detail"
    if isinstance(detail, list):
        if any(isinstance(item, dict) for item in detail):
            return flatten(next(item for item in detail if isinstance(item, dict)), prefix)
        return {field: [str(item) for item in detail]}
    return {field: [str(detail)]}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = drf_exception_handler(exc, context)
    if response is not None:
        response.data = {"errors": exc.errors if isinstance(exc, FieldParseError) else flatten(response.data)}
    return response
