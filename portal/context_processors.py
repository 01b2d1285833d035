from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

from portal import access


def gridlane(request: HttpRequest) -> dict[str, object]:
    return {"demo": settings.DEMO, "is_it": access.is_it(request.user)}
