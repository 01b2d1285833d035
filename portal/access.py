"""The one road to other people's objects: what each identity may see and do.

Views and the API reach workloads, queues and agents through these helpers only. Another team's
workload is not forbidden but absent: `access_workload` answers 404 as if it did not exist.

Identities: a person (a member or lead of teams, or IT staff) or a service identity (an AI agent
with its own team, queues and quota). Each rule below is one condition per line.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from datetime import datetime
from typing import Any
from uuid import UUID

from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.http import Http404
from django.utils import timezone

from portal import sql
from portal.accounts.models import Membership, ResourceGroup, ServiceIdentity
from portal.queues.models import Queue, QuotaGrant
from portal.workloads.models import Workload


def service_of(user: Any) -> ServiceIdentity | None:
    """The user's service identity, or None for a person (preloaded by the auth backends and token lookup)."""
    if not user.is_authenticated:
        return None
    try:
        service: ServiceIdentity = user.service_identity
    except ObjectDoesNotExist:
        return None
    return service


def is_service(user: Any) -> bool:
    return service_of(user) is not None


def is_it(user: Any) -> bool:
    """IT staff: a signed-in person flagged staff or superuser (an agent never is)."""
    if not user.is_authenticated:
        return False
    if is_service(user):
        return False
    return bool(user.is_staff or user.is_superuser)


def member_group_ids(user: Any) -> QuerySet[Membership, int]:
    return Membership.objects.filter(user=user).values_list("group_id", flat=True)


def lead_group_ids(user: Any) -> QuerySet[Membership, int]:
    return Membership.objects.filter(user=user, role=Membership.Role.LEAD).values_list("group_id", flat=True)


def is_lead_of(user: Any, group_id: int) -> bool:
    return lead_group_ids(user).filter(group_id=group_id).exists()


# --- Workloads ----------------------------------------------------------------------------------------


def visible_workloads(user: Any) -> QuerySet[Workload]:
    """People: their teams' work (their own included); agents: their own; IT: everything."""
    if not user.is_authenticated:
        return Workload.objects.none()
    if is_it(user):
        return Workload.objects.all()
    if is_service(user):
        return Workload.objects.filter(owner_id=user.pk)
    return Workload.objects.filter(group_id__in=member_group_ids(user))


def access_workload(user: Any, workload_id: UUID | str) -> Workload:
    """The workload if the user may see it; Http404 otherwise, so other teams' work stays invisible."""
    try:
        return visible_workloads(user).select_related("queue", "group", "owner", "fabric").get(pk=workload_id)
    except (Workload.DoesNotExist, ValueError, ValidationError) as error:  # not a UUID
        raise Http404("No such workload.") from error


def efficiency_workloads(user: Any) -> QuerySet[Workload]:
    """Whose efficiency (portal.usage.efficiency) a user may read: their own work; as a lead, their team's; IT:
    everything. A member sees a teammate's work, not how well it used its GPUs."""
    if is_it(user):
        return visible_workloads(user)
    mine = Q(owner_id=user.pk)
    led = Q(group_id__in=lead_group_ids(user))
    return visible_workloads(user).filter(mine | led)


def access_efficiency(user: Any, workload_id: UUID | str, *, annotate: Callable[[Any], Any] = lambda q: q) -> Workload:
    """The workload whose efficiency the user may read, in one query (`annotate` adds to it); Http404 otherwise."""
    try:
        found: Workload = annotate(efficiency_workloads(user).select_related("queue", "group", "owner")).get(
            pk=workload_id
        )
    except (Workload.DoesNotExist, ValueError, ValidationError) as error:
        raise Http404("No such workload.") from error
    return found


def connectable_workload(user: Any, workload_id: UUID | str) -> Workload | None:
    """Connect to its web server (portal.connect): the owner; a member of its team once the owner shared it.
    No one else, IT included: a server runs as its owner, with their files and terminal. None when not."""
    if not user.is_authenticated:
        return None
    mine = Q(owner_id=user.pk)
    shared = Q(shared_with_team=True, group_id__in=member_group_ids(user))
    try:
        return Workload.objects.select_related("fabric").filter(mine | shared).filter(pk=workload_id).first()
    except (ValueError, ValidationError):  # not a UUID
        return None


def may_connect(user: Any, workload: Workload) -> bool:
    """`connectable_workload`'s rule for a workload in hand (pages decide whether to show its Open button)."""
    if workload.owner_id == user.pk:
        return True
    return workload.shared_with_team and member_group_ids(user).filter(group_id=workload.group_id).exists()


def may_share(user: Any, workload: Workload) -> bool:
    """Share a workload's web server with its team, or stop sharing: its owner only (a person, not an agent)."""
    return workload.owner_id == user.pk and not is_service(user)


def can_manage(user: Any, workload: Workload) -> bool:
    """Cancel: the owner (person or agent), a lead of the workload's team, or IT."""
    if is_it(user):
        return True
    if workload.owner_id == user.pk:
        return True
    return is_lead_of(user, workload.group_id)


def may_reprioritize(user: Any, workload: Workload) -> bool:
    """Changing a submitted workload's priority tier is managing the team's work: its leads and IT (which
    tiers: those the team may use, portal.queues.tiers)."""
    return is_it(user) or is_lead_of(user, workload.group_id)


# --- Queues (entitlements) ----------------------------------------------------------------------------


def usable_queues(user: Any) -> QuerySet[Queue]:
    """Enabled queues open to one of the user's teams; an agent's also within its own list; all for IT."""
    queues = Queue.objects.filter(enabled=True)
    if is_it(user):
        return queues
    service = service_of(user)
    if service is None:
        return queues.filter(allowed_groups__in=member_group_ids(user)).distinct()
    if not service.is_active():
        return queues.none()
    queues = queues.filter(allowed_groups=service.group_id)
    if service.allowed_queues.exists():
        queues = queues.filter(service_identities=service)
    return queues.distinct()


def submit_groups(user: Any, queue: Queue) -> QuerySet[ResourceGroup]:
    """The teams in whose name the user may submit to this queue (an agent: its own team, if entitled)."""
    open_to_queue = ResourceGroup.objects.filter(queues=queue)
    if is_it(user):
        return open_to_queue.distinct()
    if is_service(user):
        if not usable_queues(user).filter(pk=queue.pk).exists():
            return ResourceGroup.objects.none()
        return open_to_queue.filter(service_identities__user=user).distinct()
    return open_to_queue.filter(memberships__user=user).distinct()


def submit_entitlement(
    user: Any,
    queue: Queue,
    columns: Callable[[str, datetime], dict[str, Any]] | None = None,
    shape: Hashable = None,
) -> tuple[list[ResourceGroup], frozenset[int]]:
    """What submit_groups says, and which of those teams the user leads (who may use a tier for leads only),
    in one query: the submit path's whole entitlement check. Teams in slug order.

    `columns(ref, now)`, where given, annotates each team with more values read in that same query (`ref`: how
    the query names the team's id; `now`: the time they are read for), e.g. its limits
    (portal.workloads.limits.cap_columns). `shape`, where given, names what `columns` makes: a person's query is
    then built and compiled once per shape and run again with their ids and the time (sql.Compiled)."""
    more = columns or (lambda ref, now: {})
    now = timezone.now()
    if is_it(user):
        return list(ResourceGroup.objects.filter(queues=queue).distinct().annotate(**more("pk", now))), frozenset()
    service = service_of(user)
    if service is not None:
        if not service.is_active():
            return [], frozenset()
        chosen = ServiceIdentity.allowed_queues.through.objects.filter(serviceidentity_id=service.pk)
        own = ResourceGroup.objects.filter(pk=service.group_id, queues=queue).annotate(**more("pk", now))
        # Its team's queue, and among its own list when it has one.
        return list(own.filter(~Exists(chosen) | Exists(chosen.filter(queue_id=queue.pk)))), frozenset()

    def teams(user_id: Any, queue_id: Any, at: datetime) -> QuerySet[ResourceGroup]:
        # The membership's role comes from the join that filters by it (annotate after filter reuses it).
        mine = ResourceGroup.objects.filter(queues=queue_id, memberships__user=user_id)
        return mine.annotate(role=F("memberships__role"), **more("pk", at)).order_by("slug")

    if shape is None:
        rows = list(teams(user.pk, queue.pk, now))
    else:
        rows = list(_MEMBER_TEAMS.run(shape, teams, user.pk, queue.pk, now))
    return rows, frozenset(g.pk for g in rows if getattr(g, "role", None) == Membership.Role.LEAD)


# A person's teams for a queue: the submit path's largest query, built once per shape of its columns.
_MEMBER_TEAMS = sql.Compiled(ResourceGroup)


def code_groups(user: Any) -> QuerySet[ResourceGroup]:
    """The teams whose code bundles the user may upload, look up and fetch (portal.code): a person's own teams,
    an agent's team while it is active, and any team for IT (who may submit for any team)."""
    if is_it(user):
        return ResourceGroup.objects.all()
    service = service_of(user)
    if service is not None:
        own = ResourceGroup.objects.filter(pk=service.group_id)
        return own if service.is_active() else own.none()
    return ResourceGroup.objects.filter(memberships__user=user).distinct()


# --- Service identities (agents) ----------------------------------------------------------------------


def visible_service_identities(user: Any) -> QuerySet[ServiceIdentity]:
    """People see their teams' agents; IT sees all; an agent sees none (not even itself, here)."""
    agents = ServiceIdentity.objects.select_related("user", "group")
    if not user.is_authenticated:
        return agents.none()
    if is_it(user):
        return agents
    if is_service(user):
        return agents.none()
    return agents.filter(group_id__in=member_group_ids(user))


def access_service_identity(user: Any, pk: int) -> ServiceIdentity:
    try:
        return visible_service_identities(user).get(pk=pk)
    except ServiceIdentity.DoesNotExist as error:
        raise Http404("No such agent.") from error


def can_manage_service_identity(user: Any, service: ServiceIdentity) -> bool:
    """Change an agent, issue or revoke its tokens: the leads of its team, or IT."""
    if is_it(user):
        return True
    return is_lead_of(user, service.group_id)


def agent_groups(user: Any) -> QuerySet[ResourceGroup]:
    """Teams for which the user may create agents: those they lead; every team for IT."""
    if is_it(user):
        return ResourceGroup.objects.all()
    if is_service(user):
        return ResourceGroup.objects.none()
    return ResourceGroup.objects.filter(pk__in=lead_group_ids(user))


def may_issue_personal_tokens(user: Any) -> bool:
    """People create their own tokens; an agent's tokens come from its team's leads or IT."""
    if not user.is_authenticated:
        return False
    return not is_service(user)


def visible_groups(user: Any) -> QuerySet[ResourceGroup]:
    """Teams whose dashboard the user may see: members and leads their own teams, IT every team, agents none."""
    if not user.is_authenticated:
        return ResourceGroup.objects.none()
    if is_service(user):
        return ResourceGroup.objects.none()
    if is_it(user):
        return ResourceGroup.objects.all()
    return ResourceGroup.objects.filter(pk__in=member_group_ids(user))


def access_group(user: Any, slug: str) -> ResourceGroup:
    """The team if the user may see its dashboard; Http404 otherwise, as if it did not exist."""
    return access_group_led(user, slug)[0]


def access_group_led(user: Any, slug: str) -> tuple[ResourceGroup, bool]:
    """The team if the user may see its dashboard (Http404 otherwise), and whether the user leads it: one query."""
    reader = int(getattr(user, "pk", None) or 0)  # signed out: nobody leads
    leads = Membership.objects.filter(group=OuterRef("pk"), user_id=reader, role=Membership.Role.LEAD)
    try:
        group = visible_groups(user).annotate(reader_leads=Exists(leads)).get(slug=slug)
    except ResourceGroup.DoesNotExist as error:
        raise Http404("No such team.") from error
    return group, bool(group.reader_leads)


def usage_groups(user: Any) -> QuerySet[ResourceGroup]:
    """Teams whose usage and cost the user may read: those whose dashboard they see, and an agent its own team."""
    service = service_of(user)
    if service is not None:
        return ResourceGroup.objects.filter(pk=service.group_id)
    return visible_groups(user)


def access_group_usage(user: Any, slug: str) -> ResourceGroup:
    """The team if the user may read its usage; Http404 otherwise, as if it did not exist."""
    try:
        return usage_groups(user).get(slug=slug)
    except ResourceGroup.DoesNotExist as error:
        raise Http404("No such team.") from error


def may_export_usage(user: Any, group: ResourceGroup, lead: bool | None = None) -> bool:
    """The team's cost export (CSV): its leads and IT. `lead`: whether the user leads the team, when the caller
    has read it already."""
    if is_it(user):
        return True
    return lead if lead is not None else is_lead_of(user, group.pk)


# --- Temporary grants ---------------------------------------------------------------------------------


def may_ask_for_grant(user: Any, group: ResourceGroup, lead: bool | None = None) -> bool:
    """Ask for (or withdraw) a temporary grant for a team: its leads. IT decides asks; it does not make them.
    `lead`: whether the user leads the team, when the caller has read it already."""
    if is_service(user):
        return False
    return lead if lead is not None else is_lead_of(user, group.pk)


def may_see_every_grant(user: Any, group: ResourceGroup, lead: bool | None = None) -> bool:
    """A team's grants asked for, declined and withdrawn too: its leads and IT. Its members see those approved
    and not yet over (what raises their team's quota now or soon)."""
    if is_it(user):
        return True
    return lead if lead is not None else is_lead_of(user, group.pk)


def may_decide_grants(user: Any) -> bool:
    """Approve or decline an ask: IT."""
    return is_it(user)


def visible_grants(user: Any) -> QuerySet[QuotaGrant]:
    """Grants of the user's teams (people); all of them for IT; none for agents."""
    grants = QuotaGrant.objects.select_related("team", "fabric")
    if not user.is_authenticated:
        return grants.none()
    if is_it(user):
        return grants
    if is_service(user):
        return grants.none()
    return grants.filter(team_id__in=member_group_ids(user))


def access_grant_for_it(user: Any, pk: int) -> QuotaGrant:
    """Any grant, for IT deciding it; Http404 for everyone else and for one that does not exist."""
    if not may_decide_grants(user):
        raise Http404("No such grant.")
    try:
        return visible_grants(user).get(pk=pk)
    except QuotaGrant.DoesNotExist as error:
        raise Http404("No such grant.") from error


def access_grant(user: Any, group: ResourceGroup, pk: int) -> QuotaGrant:
    """The team's grant if the user may see it; Http404 otherwise, as if it did not exist."""
    try:
        return visible_grants(user).get(pk=pk, team=group)
    except QuotaGrant.DoesNotExist as error:
        raise Http404("No such grant.") from error


# --- Departments --------------------------------------------------------------------------------------


def visible_departments(user: Any) -> QuerySet[ResourceGroup]:
    """Departments (teams with teams below them) whose dashboard the user may see: IT every one; a person the
    departments they belong to themselves (its heads), not those of their teams; agents none."""
    departments = ResourceGroup.objects.filter(Exists(ResourceGroup.objects.filter(parent=OuterRef("pk"))))
    if not user.is_authenticated:
        return departments.none()
    if is_service(user):
        return departments.none()
    if is_it(user):
        return departments
    return departments.filter(pk__in=member_group_ids(user))


def access_department(user: Any, slug: str) -> ResourceGroup:
    """The department if the user may see its dashboard; Http404 otherwise, as if it did not exist."""
    try:
        return visible_departments(user).get(slug=slug)
    except ResourceGroup.DoesNotExist as error:
        raise Http404("No such department.") from error
