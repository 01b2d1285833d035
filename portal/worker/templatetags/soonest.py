"""Where Gridlane would start a waiting workload, and what fabrics have free now (portal/worker/whereto.py)."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils import timezone

from portal.worker import whereto
from portal.workloads.states import State

register = template.Library()


@register.simple_tag
def where_to_start(w: Any) -> list[whereto.Start]:
    """The workload's targets by soonest start, while it waits (in Gridlane's line or a fabric's queue)."""
    if w.state not in (State.PENDING, State.DISPATCHING):
        return []
    return whereto.starts(w, timezone.now())


@register.simple_tag
def live_free_rows() -> list[whereto.PoolRow]:
    return whereto.capacity_rows(timezone.now())
