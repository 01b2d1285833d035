"""Fabric adapters for the worker, one per fabric and kept between cycles (SSH sessions, API clients)."""

from __future__ import annotations

import logging

from fabrics.base import Fabric, FabricConfig
from fabrics.registry import connect
from portal.queues.models import Fabric as FabricRow

log = logging.getLogger("gridlane.worker")

_open: dict[int, tuple[FabricConfig, Fabric]] = {}


def fabric_for(row: FabricRow) -> Fabric:
    """The adapter for this fabric, reconnected when IT changed its settings."""
    config = row.to_config()
    cached = _open.get(row.pk)
    if cached is None or cached[0] != config:
        if cached is not None:
            _close(cached[1])
        cached = (config, connect(config))
        _open[row.pk] = cached
    return cached[1]


def forget_all() -> None:
    for _, fabric in _open.values():
        _close(fabric)
    _open.clear()


def _close(fabric: Fabric) -> None:
    """Let go of an adapter's connection (an SSH session, say); adapters without one have no close()."""
    close = getattr(fabric, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:  # closing a dead connection must not stop the worker
        log.exception("closing a fabric connection failed")
