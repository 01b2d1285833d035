"""A team's leads hear when its work starts waiting at the team's limit: at most once an hour per team (the
outbox's key), through the notification events they chose (portal.notify)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.conf import settings
from django.urls import reverse

from portal.accounts.models import Membership
from portal.notify import outbox
from portal.notify.models import Event
from portal.workloads.models import Workload


def tell_leads(reasons_of: dict[str, str], now: datetime) -> int:
    """`reasons_of`: work that has just come to wait at its team's limit, by id, with the reason it gives. Two
    queries, then the outbox's two per team with leads."""
    if not reasons_of:
        return 0
    first: dict[int, str] = {}  # team -> one of its workloads' ids
    for group_id, pk in Workload.objects.filter(pk__in=list(reasons_of)).values_list("group_id", "pk"):
        first.setdefault(group_id, str(pk))
    leads: defaultdict[int, list[int]] = defaultdict(list)
    names: dict[int, tuple[str, str]] = {}
    for group_id, user_id, name, slug in Membership.objects.filter(
        group_id__in=list(first), role=Membership.Role.LEAD
    ).values_list("group_id", "user_id", "group__name", "group__slug"):
        leads[group_id].append(user_id)
        names[group_id] = (name, slug)
    told = 0
    for group_id, user_ids in leads.items():
        name, slug = names[group_id]
        text = f"Work of {name} waits at the team's limit. {reasons_of[first[group_id]]}"
        url = f"{settings.GRIDLANE_PUBLIC_URL}{reverse('dashboards:team', args=[slug])}"
        key = f"team-limit:{group_id}:{now:%Y-%m-%dT%H}"
        told += outbox.tell_people(user_ids, Event.TEAM_LIMIT, key, f"{name} is at its limit", text, url)
    return told
