"""Sharing a workload's web server with its team: the owner's choice, off by default, audited.

A teammate it is shared with opens the server as its owner (a notebook's files and terminals are the owner's),
so only the owner may share, and only with the team the workload belongs to.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db import transaction

from portal import access
from portal.accounts import audit
from portal.workloads.models import Workload, WorkloadEvent


def check_share(user: Any, workload: Workload) -> None:
    if not access.may_share(user, workload):
        raise PermissionDenied("Only its owner may share a workload's server.")


def do_share(user: Any, workload: Workload, shared: bool) -> bool:
    """Share (or stop sharing) with the team; False when it already was as asked."""
    with transaction.atomic():
        changed = (
            Workload.objects.filter(pk=workload.pk).exclude(shared_with_team=shared).update(shared_with_team=shared)
        )
        if changed:
            words = f"shared with {workload.group.name}" if shared else "no longer shared with the team"
            WorkloadEvent.objects.create(
                workload=workload, actor=user, from_state=workload.state, to_state=workload.state,
                reason=f"Its server is {words}",
            )  # fmt: skip
            audit.record("workload.shared" if shared else "workload.unshared", workload, actor=user)
    workload.shared_with_team = shared
    return bool(changed)
