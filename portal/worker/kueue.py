"""Kueue in step: each Kueue-owned Kubernetes fabric's ClusterQueues, LocalQueues and flavor follow Gridlane's
quotas, every GRIDLANE_KUEUE_SYNC_SECONDS and at the next cycle after a Quota, a team's department or the fabric
changes (a signal marks the fabric's KueueSync due). The description is built in three queries for all fabrics;
what differed is kept on KueueSync for IT's fabric page. Never raises: a cluster that does not answer keeps its
error on the page and is tried again next time.

A fabric with a namespace per team (`namespace_pattern`) but without Kueue ownership is kept at the same period and
on the same signals: each team's Namespace (its labels), ServiceAccount and ResourceQuota (its limit) follow
Gridlane's quotas (KubernetesFabric.reconcile_tenancy). Its KueueSync row keeps only the timing, the error and what
changed (report["tenancy"]); IT's fabric page shows Kueue state for Kueue-owned fabrics alone.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models.signals import post_delete, post_save

from fabrics.base import Resources
from fabrics.kubernetes.kueue import Department, Limits, Team
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, KueueSync, QueueTarget, Quota
from portal.worker.connections import fabric_for

log = logging.getLogger("gridlane.worker")

# A fabric's fields that change its Kueue objects.
SHAPES_KUEUE = frozenset({"name", "enabled", "gpu_flavor", "gpus_milli", "cpus_milli", "memory_mib", "settings"})


def kept_fabrics() -> list[Fabric]:
    """The enabled Kubernetes fabrics the worker keeps: Kueue-owned, or with a namespace per team."""
    return [
        f
        for f in Fabric.objects.filter(kind="kubernetes", enabled=True)
        if (f.settings or {}).get("kueue_owned") or (f.settings or {}).get("namespace_pattern")
    ]


def describe(fabrics: list[Fabric]) -> dict[int, tuple[list[Team], list[Department]]]:
    """Per fabric: its teams (a Quota there, or a queue sending work there) and their departments; three queries."""
    ids = [f.pk for f in fabrics]
    quotas = {(q.group_id, q.fabric_id): q for q in Quota.objects.filter(fabric_id__in=ids)}
    users: dict[int, set[int]] = {pk: set() for pk in ids}
    for fabric_id, group_id in QueueTarget.objects.filter(
        fabric_id__in=ids, queue__allowed_groups__isnull=False
    ).values_list("fabric_id", "queue__allowed_groups"):
        users[fabric_id].add(group_id)
    groups = {g.pk: g for g in ResourceGroup.objects.select_related("parent")}
    parents = {g.parent_id for g in groups.values() if g.parent_id}
    described = {}
    for pk in ids:
        members = ({g for g, f in quotas if f == pk} | users[pk]) - parents  # departments lend, they do not submit
        teams = []
        for group_id in sorted(members, key=lambda g: groups[g].slug):
            group, quota = groups[group_id], quotas.get((group_id, pk))
            department = group.parent.slug if group.parent else None
            teams.append(Team(group.slug, department, *_amounts(quota), weight=float(group.fair_share_weight)))
        departments = [
            Department(groups[g].slug, *_amounts(q), weight=float(groups[g].fair_share_weight))
            for (g, f), q in quotas.items()
            if f == pk and g in parents
        ]
        described[pk] = (teams, departments)
    return described


def _amounts(quota: Quota | None) -> tuple[Resources, Limits]:
    if quota is None:
        return Resources(0, 0, 0), Limits()
    return quota.reservation, Limits(quota.gpu_limit_milli, quota.cpu_limit_milli, quota.memory_limit_mib)


def step(now: datetime) -> int:
    """Reconcile each kept fabric (Kueue-owned, or a namespace per team) that is due; how many were reconciled."""
    try:
        fabrics = kept_fabrics()
        states = {s.fabric_id: s for s in KueueSync.objects.filter(fabric__in=fabrics)}
        every = timedelta(seconds=settings.GRIDLANE_KUEUE_SYNC_SECONDS)
        due = [
            f
            for f in fabrics
            if (s := states.get(f.pk)) is None or s.due or s.reconciled_at is None or now - s.reconciled_at >= every
        ]
        described = describe(due) if due else {}
    except Exception:
        log.exception("Kueue: cannot read what to reconcile; the next cycle tries again")
        return 0
    for fabric in due:
        # Cleared before the run: a change made while it runs marks it due again.
        KueueSync.objects.update_or_create(fabric=fabric, defaults={"due": False})
        fields: dict[str, Any] = {"reconciled_at": now}
        try:
            fields |= _reconcile(fabric, *described[fabric.pk])
        except Exception as error:
            log.warning("Kueue on %s: %s", fabric.name, error, exc_info=not hasattr(error, "retryable"))
            fields |= {"error": str(error)[:500]}
        KueueSync.objects.filter(fabric=fabric).update(**fields)
    return len(due)


def _reconcile(fabric: Fabric, teams: list[Team], departments: list[Department]) -> dict[str, Any]:
    """One fabric put in step; the KueueSync fields that say how it stood. Raises what the cluster raised."""
    adapter: Any = fabric_for(fabric)
    if not (fabric.settings or {}).get("kueue_owned"):
        changed = adapter.reconcile_tenancy(teams)  # namespaces, their labels and quotas, without Kueue
        if changed:
            log.info("Namespaces on %s: put in step: %s", fabric.name, ", ".join(changed))
        return {"error": "", "drifted": [], "report": {"tenancy": changed}}
    report = adapter.reconcile_kueue(str(fabric.pk), teams, departments)
    if report.drift:
        log.warning("Kueue on %s: drifted and put back: %s", fabric.name, ", ".join(report.drifted))
    return {"error": "", "drifted": report.drifted, "report": report.as_dict()}


def mark_due(sender: Any, instance: Any, **kwargs: Any) -> None:
    """A Quota, a team or a fabric changed: reconcile at the next cycle (one UPDATE; nothing when none is owned)."""
    if isinstance(instance, Fabric):
        fields = kwargs.get("update_fields")
        if fields is not None and not set(fields) & SHAPES_KUEUE:  # the worker's own health and capacity notes
            return
        KueueSync.objects.filter(fabric=instance).update(due=True)
    else:
        KueueSync.objects.update(due=True)


def connect() -> None:
    """Called once from the worker app's ready()."""
    for model in (Quota, ResourceGroup, Fabric):
        post_save.connect(mark_due, sender=model, dispatch_uid=f"kueue:{model.__name__}")
        post_delete.connect(mark_due, sender=model, dispatch_uid=f"kueue:{model.__name__}")
