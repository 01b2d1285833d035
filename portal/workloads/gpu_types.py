"""The GPU types a request may name, as the workloads layer asks for them: the types the targets of its queue
have. A request that names no type is open (any type); a named type must be one some target of the queue has,
and targets without it are skipped when the job is routed (scheduler/soonest.py).

Which types a queue's targets have is known to the worker, from its fabrics' inventories (portal.worker.gpu_types).
This module owns the seam and imports nothing from the worker: the worker registers its reader when its app is
ready (portal.worker.apps). With no reader registered, no queue offers a named type.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from django.utils import timezone

from portal.queues.models import Queue

TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,39}$")

Reader = Callable[[Queue, datetime], list[str]]
_reader: Reader | None = None


def register(reader: Reader | None) -> None:
    """Set (None: take away) the one reader of the types a queue's targets have."""
    global _reader
    _reader = reader


def offered(queue: Queue, now: datetime | None = None) -> list[str]:
    """The GPU types the queue's targets have, sorted."""
    return _reader(queue, now or timezone.now()) if _reader is not None else []


def choices(queues: list[Queue]) -> list[tuple[str, str]]:
    """The form's choices: any, then each type some target of these queues has, with the queues that have it."""
    now = timezone.now()
    where: dict[str, list[str]] = {}
    for queue in queues:
        for gpu_type in offered(queue, now):
            where.setdefault(gpu_type, []).append(queue.name)
    return [("", "Any"), *((t, f"{t} ({', '.join(names)})") for t, names in sorted(where.items()))]


def check(queue: Queue, gpu_type: str) -> str:
    """Why the type is refused for this queue, in words; "" where it is fine (or not named)."""
    if not gpu_type:
        return ""
    if not TYPE_RE.fullmatch(gpu_type):
        return "Name a GPU type in lower case: letters, digits, '.', '_' or '-' (up to 40), e.g. h100."
    types = offered(queue)
    if gpu_type not in types:
        have = ", ".join(types) if types else "no named types"
        return f"The queue {queue.name} has {have}; leave it empty for any type."
    return ""
