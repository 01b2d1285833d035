"""The GPU types a request may name: the types the targets of its queue have, by their fabrics' inventories.

A target's types are those its last fresh observation names (fabrics/live.py), plus the one its settings pin
(a Slurm or PBS fabric's `gpu_type`, a Kubernetes fabric's `gpu_flavor`). A request that names no type is open
(any type). A named type must be one some target of the queue has; targets without it are skipped when the job
is routed (scheduler/soonest.py).
"""

from __future__ import annotations

import re
from datetime import datetime

from django.utils import timezone

from portal.queues.models import Fabric, Queue
from portal.worker import live
from portal.worker.capacity import live_since

TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,39}$")
SETTINGS = ("gpu_type", "gpu_flavor")


def offered(queue: Queue, now: datetime | None = None) -> list[str]:
    """The GPU types the queue's targets have, sorted (two queries)."""
    now = now or timezone.now()
    fabrics = list(Fabric.objects.filter(enabled=True, targets__queue=queue).distinct())
    observed = live.fresh(now, live_since(now))
    types: set[str] = set()
    for fabric in fabrics:
        for key in SETTINGS:
            value = str((fabric.settings or {}).get(key) or "").lower()
            if value:
                types.add(value)
        answer = observed.get(fabric.pk)
        if answer is not None:
            types |= answer[1].types()
    return sorted(types)


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
