"""Teams from claims: the provider's groups claim, through IT's ClaimMappings, decides memberships and IT staff.

Claims are the truth for every team that has a mapping: a membership the claims no longer give is removed.
Teams without any mapping are managed by hand and left alone. IT staff follows the claims once any
mapping makes someone IT staff (until then, staff flags are managed by hand too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from portal.accounts.models import ClaimMapping, Membership

RANK = {Membership.Role.MEMBER: 0, Membership.Role.LEAD: 1}


@dataclass
class Grants:
    roles: dict[int, str] = field(default_factory=dict)  # group id -> role
    it_staff: bool = False
    managed_groups: set[int] = field(default_factory=set)
    it_managed: bool = False


def grants_for(values: list[str]) -> Grants:
    """What these claim values grant under the current mappings (the highest role wins per team)."""
    grants = Grants()
    wanted = set(values)
    for mapping in ClaimMapping.objects.all():
        if mapping.group_id is not None:
            grants.managed_groups.add(mapping.group_id)
        grants.it_managed |= mapping.makes_it_staff
        if mapping.claim_value not in wanted:
            continue
        grants.it_staff |= mapping.makes_it_staff
        if mapping.group_id is None:
            continue
        current = grants.roles.get(mapping.group_id)
        if current is None or RANK[Membership.Role(mapping.role)] > RANK[Membership.Role(current)]:
            grants.roles[mapping.group_id] = mapping.role
    return grants


def apply_groups(user: Any, values: list[str]) -> Grants:
    """Make the user's memberships and IT flag match the claim values. Changes are audited by signal."""
    grants = grants_for(values)
    current = {m.group_id: m for m in Membership.objects.filter(user=user, group_id__in=grants.managed_groups)}
    for group_id, role in grants.roles.items():
        membership = current.pop(group_id, None)
        if membership is None:
            Membership.objects.create(user=user, group_id=group_id, role=role)
        elif membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
    for membership in current.values():  # the claims no longer give these
        membership.delete()
    if grants.it_managed and (user.is_staff, user.is_superuser) != (grants.it_staff, grants.it_staff):
        user.is_staff = user.is_superuser = grants.it_staff
        user.save(update_fields=["is_staff", "is_superuser"])
    return grants
