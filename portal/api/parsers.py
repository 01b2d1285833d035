"""The API's JSON parser: a body is UTF-8 JSON of bounded size and depth, or the request is refused with 400 or
413 in the API's error shape, never a server error.

DRF's own parser reads the whole body whatever its size (Django's DATA_UPLOAD_MAX_MEMORY_SIZE guards only
request.body and forms), decodes with whatever charset the client names (an unknown one is a LookupError), and
lets a deeply nested document reach Python's recursion limit; and `NaN` is not JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from rest_framework import parsers, status
from rest_framework.exceptions import APIException, ParseError

from portal.api import text_check

# Nothing the API takes nests deeper than a few levels (a workload's resources, an agent's report).
MAX_DEPTH = 32


class TooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "too_large"


def _no_constants(name: str) -> Any:
    raise ParseError(f"JSON parse error - {name} is not a JSON number.")


def _finite(text: str) -> float:
    """A JSON number with a fraction or exponent; one past a float's range (1e400) is refused, not infinite."""
    number = float(text)
    if not math.isfinite(number):
        raise ParseError(f"JSON parse error - {text[:40]} is out of range.")
    return number


class JSONParser(parsers.JSONParser):
    max_bytes: int | None = None  # a smaller limit than Django's, for endpoints that take small bodies only

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        limit = self.max_bytes or settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        request = (parser_context or {}).get("request")
        meta = request.META if request is not None else {}
        try:
            declared = int(meta.get("CONTENT_LENGTH") or 0)
        except ValueError:
            declared = 0
        if limit is not None and declared > limit:
            raise TooLarge
        raw = stream.read(limit + 1) if limit is not None else stream.read()
        if limit is not None and len(raw) > limit:
            raise TooLarge
        charset = str(getattr(request, "content_params", {}).get("charset", "utf-8")).lower()
        if charset not in ("utf-8", "utf8"):
            raise ParseError(f"JSON parse error - JSON is UTF-8, and this body says it is {charset[:40]}.")
        # JSON is UTF-8 (RFC 8259); a byte that is not stays in its string as a lone surrogate, so that the
        # refusal can name the field it was in (text_check)
        text = raw.decode("utf-8-sig", "surrogateescape")
        try:
            data = json.loads(text, parse_constant=_no_constants, parse_float=_finite)
        except RecursionError:
            raise ParseError(f"JSON parse error - nested more than {MAX_DEPTH} levels deep.") from None
        except ValueError as error:
            raise ParseError(f"JSON parse error - {error}") from None
        text_check.check(data, MAX_DEPTH)
        return data
