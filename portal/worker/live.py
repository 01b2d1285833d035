"""Each fabric's last answer to "what is free now", kept per fabric with its age (fabrics/live.py).

Kept by the capacity step (capacity.observe) once per fabric per period, with the answer's other numbers; read
once per scheduling cycle. An answer older than capacity.FRESH_PERIODS periods is not read: planning falls back
to IT's declaration, as for a fabric that never answered. With GRIDLANE_LIVE_ROUTING off (`routing()`), no answer
is read for planning at all: every fabric is planned with its declaration and nothing is moved (the answers are
still kept, for IT's pages).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from django.conf import settings

from fabrics.base import Resources
from fabrics.live import FreeNow
from portal.worker.models import FabricFree
from scheduler.model import Snapshot


def routing() -> bool:
    """Whether planning routes on what fabrics have free now (the site's GRIDLANE_LIVE_ROUTING, on by default)."""
    return bool(getattr(settings, "GRIDLANE_LIVE_ROUTING", True))


def keep(fabric_id: int, free: FreeNow | None, now: datetime) -> None:
    """Replace the fabric's answer (an answer without an observation drops the last one)."""
    if free is None:
        FabricFree.objects.filter(fabric_id=fabric_id).delete()
        return
    FabricFree.objects.update_or_create(fabric_id=fabric_id, defaults={"observed_at": now, "data": free.to_json()})


def fresh(now: datetime, since: datetime) -> dict[int, tuple[datetime, FreeNow]]:
    """Each fabric's answer observed at `since` or later, with when it was observed (one query)."""
    out: dict[int, tuple[datetime, FreeNow]] = {}
    for fabric_id, observed_at, data in FabricFree.objects.filter(
        observed_at__gte=since, observed_at__lte=now
    ).values_list("fabric_id", "observed_at", "data"):
        try:
            out[fabric_id] = (observed_at, FreeNow.from_json(data))
        except (KeyError, TypeError, ValueError):
            continue  # a row of another shape (an older Gridlane): as if never observed
    return out


def rooms(snapshot: Snapshot, since: datetime) -> dict[int, FreeNow]:
    """What each fabric of the snapshot has free now, from its fresh answer: less what Gridlane sent there that the
    answer cannot have seen (work not started yet, or started after the answer). Fabrics without a fresh answer
    are left out (planned with their declaration); with live routing off, every fabric is."""
    if not routing():
        return {}
    observed = {fid: answer for fid, answer in fresh(snapshot.now, since).items() if fid in snapshot.fabrics}
    if not observed:
        return {}
    unseen: dict[int, Resources] = {}
    for job in snapshot.running:
        fid = job.fabric_id
        if fid in observed and (job.started_at is None or job.started_at > observed[fid][0]):
            unseen[fid] = unseen.get(fid, Resources()) + job.total
    out = {}
    for fid, (_, answer) in observed.items():
        less = unseen.get(fid)
        out[fid] = replace(answer, free=answer.free - less) if less is not None else answer
    return out
