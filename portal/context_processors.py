from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

from portal import access


def simulated_gpus() -> list[str]:
    """The fabrics whose GPU readings are the demo's stand-ins (fabrics/local/standin.py); none outside demo
    mode. Called by a template only where it shows GPU readings (one query then)."""
    if not settings.DEMO:
        return []
    from portal.queues.models import Fabric

    local = Fabric.objects.filter(kind="local").order_by("name")
    return [f.name for f in local if f.resolved_settings().get("simulated_gpus")]


def gridlane(request: HttpRequest) -> dict[str, object]:
    return {"demo": settings.DEMO, "is_it": access.is_it(request.user), "simulated_gpus": simulated_gpus}
