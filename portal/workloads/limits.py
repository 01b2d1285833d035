"""A team's caps, read from its quotas: plain functions over rows the caller has loaded (no queries), shared
by the submit's "can never run" check and the form's guide."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import OuterRef, Subquery, Sum
from django.utils import timezone

from portal.queues.models import Fabric, Quota, QuotaGrant

NO_CAP = 2**62


@dataclass(frozen=True)
class Cap:
    """The most a team may hold at once on one fabric, per resource (NO_CAP: no limit beyond the fabric)."""

    gpus_milli: int = NO_CAP
    cpus_milli: int = NO_CAP
    memory_mib: int = NO_CAP

    def lower(self, quota: Quota) -> Cap:
        def low(mine: int, theirs: int | None) -> int:
            return mine if theirs is None else min(mine, theirs)

        return Cap(
            low(self.gpus_milli, quota.gpu_limit_milli),
            low(self.cpus_milli, quota.cpu_limit_milli),
            low(self.memory_mib, quota.memory_limit_mib),
        )


def cap_on(fabric: Fabric, quotas: Iterable[Quota]) -> Cap:
    """A team's cap on `fabric`: its quota there and its team-wide quota (no fabric), whichever is lower."""
    cap = Cap()
    for quota in quotas:
        if quota.fabric_id is None or quota.fabric_id == fabric.pk:
            cap = cap.lower(quota)
    return cap


LIMITS = (("gpus_milli", "gpu_limit_milli"), ("cpus_milli", "cpu_limit_milli"), ("memory_mib", "memory_limit_mib"))


def _column(fabric_id: int | None, limit: str) -> str:
    return f"cap_{fabric_id or 'all'}_{limit}"


def cap_columns(fabric_ids: Iterable[int], group_ref: str, now: datetime | None = None) -> dict[str, Subquery]:
    """Columns to annotate a team's rows with (group_ref: the team's id in that query): its limits on each of
    these fabrics and team-wide, and the GPUs its temporary grants add there at `now` (default: now), so that
    the submit reads them in the statement that reads its teams."""
    columns = {}
    now = now or timezone.now()
    for fabric_id in [*dict.fromkeys(fabric_ids), None]:
        # One row at most (a quota per team and fabric): no order to keep, and Quota's own would join its team and
        # fabric into each of these subqueries to sort by their names.
        quota = Quota.objects.filter(group=OuterRef(group_ref)).order_by()
        quota = quota.filter(fabric_id=fabric_id) if fabric_id is not None else quota.filter(fabric__isnull=True)
        for _, limit in LIMITS:
            columns[_column(fabric_id, limit)] = Subquery(quota.values(limit)[:1])
        if fabric_id is not None:
            columns[_column(fabric_id, "granted")] = _granted(fabric_id, group_ref, now)
    return columns


def _granted(fabric_id: int, group_ref: str, now: datetime) -> Subquery:
    granted = QuotaGrant.objects.filter(
        team=OuterRef(group_ref),
        fabric_id=fabric_id,
        state=QuotaGrant.State.APPROVED,
        starts_at__lte=now,
        ends_at__gt=now,
    )
    return Subquery(granted.order_by().values("team").annotate(n=Sum("gpus_milli")).values("n")[:1])


def grant_columns(fabric_ids: Iterable[int], group_ref: str, now: datetime | None = None) -> dict[str, Subquery]:
    """Only the GPUs a team's temporary grants add on each of these fabrics at `now` (read with granted_on)."""
    now = now or timezone.now()
    return {_column(f, "granted"): _granted(f, group_ref, now) for f in dict.fromkeys(fabric_ids)}


def granted_on(team: Any, fabric_id: int) -> int:
    """Milli-GPUs the team's grants add on the fabric now, from the columns cap_columns or grant_columns
    annotated it with (0 when none)."""
    return int(getattr(team, _column(fabric_id, "granted"), None) or 0)


def cap_read(team: Any, fabric_id: int) -> Cap:
    """A team's cap on a fabric from the columns cap_columns annotated it with: the lower of its quota there
    and its team-wide one, per resource; GPUs raised by its temporary grants there now, as the worker's
    snapshot raises both (portal/worker/snapshot.py with_grants)."""
    values = {}
    granted = getattr(team, _column(fabric_id, "granted"), None) or 0
    for name, limit in LIMITS:
        found = [getattr(team, _column(f, limit), None) for f in (fabric_id, None)]
        if name == "gpus_milli":
            found = [None if v is None else v + granted for v in found]
        values[name] = min((v for v in found if v is not None), default=NO_CAP)
    return Cap(**values)


def over_cap(need_gpus: int, need_cpus: int, need_mib: int, cap: Cap) -> str:
    """What of a request passes the cap, in words ("4 GPUs, where the limit is 2"); "" when nothing does."""
    from portal import words

    if need_gpus > cap.gpus_milli:
        return f"{words.gpus(need_gpus / 1000)}, where the limit is {words.number(cap.gpus_milli / 1000)}"
    if need_cpus > cap.cpus_milli:
        return f"{words.cpus(need_cpus / 1000)}, where the limit is {words.number(cap.cpus_milli / 1000)}"
    if need_mib > cap.memory_mib:
        return f"{words.number(need_mib / 1024, 1)} GB, where the limit is {words.number(cap.memory_mib / 1024, 1)} GB"
    return ""
