"""The one road to other people's objects: what each identity may see and do.

Views and the API reach workloads and queues through these helpers only. Another team's
workload is not forbidden but absent: `access_workload` answers 404 as if it did not exist.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.core.exceptions import ValidationError
from django.db.models import QuerySet
from django.http import Http404

from portal.accounts.models import Membership, ResourceGroup
from portal.queues.models import Queue
from portal.workloads.models import Workload


def is_it(user: Any) -> bool:
    return bool(user.is_authenticated and (user.is_staff or user.is_superuser))


def member_group_ids(user: Any) -> QuerySet[Membership, int]:
    return Membership.objects.filter(user=user).values_list("group_id", flat=True)


def lead_group_ids(user: Any) -> QuerySet[Membership, int]:
    return Membership.objects.filter(user=user, role=Membership.Role.LEAD).values_list("group_id", flat=True)


def visible_workloads(user: Any) -> QuerySet[Workload]:
    """Own work, plus the work of every team the user belongs to; everything for IT."""
    if not user.is_authenticated:
        return Workload.objects.none()
    if is_it(user):
        return Workload.objects.all()
    return Workload.objects.filter(group_id__in=member_group_ids(user))


def access_workload(user: Any, workload_id: UUID | str) -> Workload:
    """The workload if the user may see it; Http404 otherwise, so other teams' work stays invisible."""
    try:
        return visible_workloads(user).select_related("queue", "group", "owner", "fabric").get(pk=workload_id)
    except (Workload.DoesNotExist, ValueError, ValidationError) as error:  # not a UUID
        raise Http404("No such workload.") from error


def can_manage(user: Any, workload: Workload) -> bool:
    """Cancel and change: the owner, a lead of the workload's team, or IT."""
    if is_it(user) or workload.owner_id == user.pk:
        return True
    return lead_group_ids(user).filter(group_id=workload.group_id).exists()


def usable_queues(user: Any) -> QuerySet[Queue]:
    """Enabled queues open to one of the user's teams; every enabled queue for IT."""
    queues = Queue.objects.filter(enabled=True)
    if is_it(user):
        return queues
    return queues.filter(allowed_groups__in=member_group_ids(user)).distinct()


def submit_groups(user: Any, queue: Queue) -> QuerySet[ResourceGroup]:
    """The user's teams that may submit to this queue, in whose name they may submit."""
    return ResourceGroup.objects.filter(memberships__user=user, queues=queue).distinct()


def may_set_priority(user: Any, group: ResourceGroup, priority: str) -> bool:
    """High priority is a lead's or IT's call; anyone may ask for normal or low."""
    if priority != "high":
        return True
    return is_it(user) or lead_group_ids(user).filter(group_id=group.pk).exists()
