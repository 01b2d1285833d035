"""Temporary grants: a lead asks for more GPUs on a fabric for a while, IT approves or declines, and a rule
approves at once what fits in the department's unused reservation. check_* validates, do_* changes and audits.

Each state change is a compare-and-swap (`filter(pk=…, state=old).update(...)`) and writes one AuditEvent:
quotagrant.created (the ask, from the model's audit signal), quotagrant.approved, .declined, .withdrawn.
Nothing here applies a grant: the worker's snapshot does, while one is approved and now is in its window.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Sum

from portal.accounts import audit
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Quota, QuotaGrant

AUTOMATIC = "approved automatically: within the department's unused reservation"


@dataclass(frozen=True)
class Ask:
    """What a lead asks for: `gpus_milli` more on `fabric` from `starts_at` to `ends_at`, and why."""

    fabric: Fabric
    gpus_milli: int
    starts_at: datetime
    ends_at: datetime
    reason: str


def check_ask(user: Any, team: ResourceGroup, ask: Ask, now: datetime) -> QuotaGrant:
    """The grant the ask would make, unsaved; ValidationError (by field) when it cannot be asked for:
    no GPUs, no reason, ending before it starts or in the past, too long, larger than the fabric, or
    overlapping a grant of the team's on that fabric that is asked for or approved."""
    grant = QuotaGrant(
        team=team,
        fabric=ask.fabric,
        gpus_milli=ask.gpus_milli,
        starts_at=ask.starts_at,
        ends_at=ask.ends_at,
        reason=ask.reason.strip(),
        requested_by=user,
        requested_at=now,
    )
    grant.full_clean()
    return grant


def do_ask(user: Any, grant: QuotaGrant, now: datetime) -> QuotaGrant:
    """Save the ask (checked again under a lock on the team, so that two asks at once cannot both pass the
    overlap check), and approve it at once where it fits in the department's unused reservation."""
    with transaction.atomic(), audit.acting_as(user):
        ResourceGroup.objects.select_for_update().filter(pk=grant.team_id).first()
        grant.full_clean()
        grant.save()
        room = department_room(grant.team, grant.fabric_id, grant.starts_at, grant.ends_at, exclude=grant.pk)
        if room is not None and grant.gpus_milli <= room:
            _decide(
                grant, QuotaGrant.State.REQUESTED, QuotaGrant.State.APPROVED, None, AUTOMATIC, now, automatically=True
            )
    return grant


def department_room(
    team: ResourceGroup, fabric_id: int, starts_at: datetime, ends_at: datetime, exclude: int | None = None
) -> int | None:
    """Milli-GPUs of the department's reservation on the fabric that none of its teams holds over the window:
    its reservation, less its teams' reservations there, less their approved grants that overlap the window
    (counted as if all at once). None when the team has no department or the department reserves nothing there.
    Three queries."""
    if team.parent_id is None:
        return None
    reserved = (
        Quota.objects.filter(group_id=team.parent_id, fabric_id=fabric_id)
        .values_list("gpu_reservation_milli", flat=True)
        .first()
    )
    if not reserved:
        return None
    teams = Quota.objects.filter(group__parent_id=team.parent_id, fabric_id=fabric_id)
    granted = QuotaGrant.objects.filter(
        team__parent_id=team.parent_id,
        fabric_id=fabric_id,
        state=QuotaGrant.State.APPROVED,
        starts_at__lt=ends_at,
        ends_at__gt=starts_at,
    )
    if exclude is not None:
        granted = granted.exclude(pk=exclude)
    held = (teams.aggregate(n=Sum("gpu_reservation_milli"))["n"] or 0) + (
        granted.aggregate(n=Sum("gpus_milli"))["n"] or 0
    )
    return reserved - held


def check_decide(grant: QuotaGrant, approve: bool) -> None:
    """ValidationError when the grant is no longer waiting for a decision, or (to approve) now overlaps another."""
    if grant.state != QuotaGrant.State.REQUESTED:
        raise ValidationError(f"This grant is {grant.state} already.")
    if approve:
        grant.clean()


def do_decide(user: Any, grant: QuotaGrant, approve: bool, note: str, now: datetime) -> bool:
    """IT's decision on an ask; False when someone else decided (or the lead withdrew) first."""
    state = QuotaGrant.State.APPROVED if approve else QuotaGrant.State.DECLINED
    with transaction.atomic(), audit.acting_as(user):
        return _decide(grant, QuotaGrant.State.REQUESTED, state, user, note.strip()[:300], now)


def may_withdraw(grant: QuotaGrant, now: datetime) -> bool:
    """An ask not yet decided, or an approved grant that has not ended (withdrawing it ends it now)."""
    if grant.state == QuotaGrant.State.REQUESTED:
        return True
    return grant.state == QuotaGrant.State.APPROVED and now < grant.ends_at


def do_withdraw(user: Any, grant: QuotaGrant, now: datetime) -> bool:
    """The lead takes the ask back, or gives an approved grant up early; False when it was not withdrawable."""
    if not may_withdraw(grant, now):
        return False
    with transaction.atomic(), audit.acting_as(user):
        return _decide(grant, grant.state, QuotaGrant.State.WITHDRAWN, user, "", now)


def _decide(
    grant: QuotaGrant, old: str, state: str, by: Any, note: str, now: datetime, *, automatically: bool = False
) -> bool:
    """Move the grant from `old` to `state` unless someone moved it first (False then), and audit the change.
    A withdrawal keeps the decision it follows (who approved, when, the note): the audit log says who withdrew."""
    fields: dict[str, Any] = {"state": state}
    if state != QuotaGrant.State.WITHDRAWN:
        fields |= {"decided_by": by, "decided_at": now, "decision_note": note}
    if QuotaGrant.objects.filter(pk=grant.pk, state=old).update(**fields) != 1:
        return False  # decided or withdrawn by someone else first
    for name, value in fields.items():
        setattr(grant, name, value)
    detail: dict[str, Any] = {
        "team": grant.team.slug,
        "fabric": str(grant.fabric),
        "gpus": grant.gpus,
        "starts_at": grant.starts_at,
        "ends_at": grant.ends_at,
        "before": old,
    }
    if note:
        detail["note"] = note
    if automatically:
        audit.record(f"quotagrant.{state}", grant, actor=None, automatically=True, **detail)
    else:
        audit.record(f"quotagrant.{state}", grant, **detail)
    return True
