"""Fabric adapters for the worker, one per fabric and kept between cycles (SSH sessions, API clients)."""

from __future__ import annotations

from fabrics.base import Fabric, FabricConfig
from fabrics.registry import connect
from portal.queues.models import Fabric as FabricRow

_open: dict[int, tuple[FabricConfig, Fabric]] = {}


def fabric_for(row: FabricRow) -> Fabric:
    """The adapter for this fabric, reconnected when IT changed its settings."""
    config = row.to_config()
    cached = _open.get(row.pk)
    if cached is None or cached[0] != config:
        cached = (config, connect(config))
        _open[row.pk] = cached
    return cached[1]


def forget_all() -> None:
    _open.clear()
