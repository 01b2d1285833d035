"""The GPU types each fabric was last observed to have, from its fresh free-now answer (fabrics/live.py): the
reader the workloads layer asks through its seam (portal.workloads.gpu_types, registered in
portal.worker.apps). An answer older than the capacity step's freshness counts for nothing."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from portal.worker import live
from portal.worker.capacity import live_since


def observed(fabric_ids: Collection[int], now: datetime) -> dict[int, set[str]]:
    """The GPU types each of these fabrics' fresh answers names (one query)."""
    fresh = live.fresh(now, live_since(now))
    return {pk: fresh[pk][1].types() for pk in fabric_ids if pk in fresh}
