"""Pod addresses kept: after each poll of a Kubernetes fabric, the IPs of each running workload's pods
(JobStatus.addresses) are kept on PodAddresses, so the connect gate and the endpoint report can tell a job's
own pods from the rest of the pod network (portal.connect.server_reach). One read and at most one write per
poll; a workload whose pods report no address keeps what was last seen (a poll that lost sight of them
widens nothing), and its row goes with it (on delete cascade).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Protocol
from uuid import UUID

from fabrics.base import JobStatus
from portal.worker.models import PodAddresses


class Polled(Protocol):
    @property
    def pk(self) -> UUID: ...

    @property
    def external_id(self) -> str: ...


def record(live: Iterable[Polled], statuses: Mapping[str, JobStatus], now: datetime) -> int:
    """Keep the addresses the poll reported for these workloads; how many rows changed."""
    seen = {w.pk: list(status.addresses) for w in live if (status := statuses.get(w.external_id)) and status.addresses}
    if not seen:
        return 0
    kept = dict(PodAddresses.objects.filter(workload_id__in=list(seen)).values_list("workload_id", "addresses"))
    changed = [
        PodAddresses(workload_id=pk, addresses=addresses, seen_at=now)
        for pk, addresses in seen.items()
        if kept.get(pk) != addresses
    ]
    if changed:
        PodAddresses.objects.bulk_create(
            changed, update_conflicts=True, unique_fields=["workload"], update_fields=["addresses", "seen_at"]
        )
    return len(changed)


def of(workload_id: UUID) -> list[str]:
    """The addresses last seen for the workload's pods; [] before any."""
    found = PodAddresses.objects.filter(workload_id=workload_id).values_list("addresses", flat=True).first()
    return [str(a) for a in found or []]
