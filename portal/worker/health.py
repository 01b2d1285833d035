"""A fabric's health flag, as the worker's steps that talk to fabrics (sync, capacity) set it."""

from __future__ import annotations

from portal.queues.models import Fabric as FabricRow


def set_health(row: FabricRow, *, healthy: bool, detail: str) -> None:
    if row.healthy != healthy or row.health_detail != detail[:300]:
        FabricRow.objects.filter(pk=row.pk).update(healthy=healthy, health_detail=detail[:300])
        row.healthy, row.health_detail = healthy, detail[:300]
