"""The GPU types a request may name, as the workloads layer asks for them: the types the targets of its queue
have. A request that names no type is open (any type); a named type must be one some target of the queue has,
and targets without it are skipped when the job is routed (scheduler/soonest.py).

A target's types are the one its fabric's settings pin (a Slurm or PBS fabric's `gpu_type`, a Kubernetes
fabric's `gpu_flavor`) and those the fabric's last fresh observation names (fabrics/live.py). The observations
are the worker's: this module owns the seam and imports nothing from the worker, which registers its reader
when its app is ready (portal.worker.apps: portal.worker.gpu_types.observed). With no reader registered, only
the pinned types count.

The submit form asks for all its queues at once (`choices`): the fabrics come with the targets it prefetched,
and the observations cost one query whatever the number of queues.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import datetime

from django.utils import timezone

from portal.queues.models import Fabric, Queue

TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,39}$")
PINNED = ("gpu_type", "gpu_flavor")  # the fabric settings that name its GPU type

Reader = Callable[[Collection[int], datetime], Mapping[int, set[str]]]  # fabric ids -> the types observed there
_reader: Reader | None = None


def register(reader: Reader | None) -> None:
    """Set (None: take away) the one reader of the types each fabric was last observed to have."""
    global _reader
    _reader = reader


def types_by_queue(fabrics_of: Mapping[int, Iterable[Fabric]], now: datetime | None = None) -> dict[int, list[str]]:
    """The GPU types of each queue's (enabled) fabrics, sorted, by queue id: one query for the observations."""
    ids = {f.pk for fabrics in fabrics_of.values() for f in fabrics}
    observed = _reader(ids, now or timezone.now()) if _reader is not None and ids else {}
    out = {}
    for queue_id, fabrics in fabrics_of.items():
        types: set[str] = set()
        for fabric in fabrics:
            types |= {str((fabric.settings or {}).get(key) or "").lower() for key in PINNED} - {""}
            types |= observed.get(fabric.pk, set())
        out[queue_id] = sorted(types)
    return out


def offered(queue: Queue, now: datetime | None = None) -> list[str]:
    """The GPU types the queue's targets have, sorted (two queries: its fabrics, their observations)."""
    fabrics = Fabric.objects.filter(enabled=True, targets__queue=queue).distinct()
    return types_by_queue({queue.pk: list(fabrics)}, now)[queue.pk]


def choices(queues: list[Queue]) -> list[tuple[str, str]]:
    """The form's choices: any, then each type some target of these queues has, with the queues that have it.
    The queues' targets and their fabrics are prefetched by the form; the observations are one query."""
    fabrics_of = {q.pk: [t.fabric for t in q.targets.all() if t.fabric.enabled] for q in queues}
    types = types_by_queue(fabrics_of)
    where: dict[str, list[str]] = {}
    for queue in queues:
        for gpu_type in types[queue.pk]:
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
