"""The seam between the burst pools and the worker's capacity step: asking a fabric what it has now, at once,
when an instance of its pool is gone (so that the next admission does not hand work to capacity that is gone).

The burst layer owns this seam and imports nothing from the worker; the worker registers its observer when its app
is ready (portal.worker.apps: portal.worker.capacity.observe). With none registered (a process without the worker
app), asking does nothing: the worker's next capacity step asks the fabric in its turn.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from portal.queues.models import Fabric

Observer = Callable[[Fabric, datetime], object]

_observer: Observer | None = None


def register(observer: Observer | None) -> None:
    """Set (None: take away) how a fabric is asked."""
    global _observer
    _observer = observer


def now(fabric: Fabric, at: datetime) -> None:
    """Ask the fabric what it has now and keep its answer (the worker's capacity step), where a worker is here."""
    if _observer is not None:
        _observer(fabric, at)
