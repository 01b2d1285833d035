"""Pure rendering of the Kueue objects (kueue.x-k8s.io/v1beta1) that make a cluster enforce Gridlane's quotas.

From a plain description of one fabric (its flavor, capacity, departments and teams with their reservation and
limit there) to the objects Kueue expects, each labelled managed-by gridlane and with the fabric's id:

    ResourceFlavor  <flavor>             nodeLabels from the fabric's node_selector (its equality terms)
    ClusterQueue    <fabric>-<team>      nominalQuota = reservation, borrowingLimit = limit - reservation (none
                                         without a limit), cohort = the team's department, else the fabric
    ClusterQueue    <fabric>-<dept>      the department's lending queue (no LocalQueue points at it): see below
    ClusterQueue    <fabric>             the lending queue of the teams without a department
    LocalQueue      gl-<team>            in each namespace the team's work runs in, to its ClusterQueue

Departments, and why a lending ClusterQueue: in v1beta1 a cohort is only a name; it holds no quota of its own
(the Cohort API that gives it one is still v1alpha1, and not on every cluster that runs Kueue), and a workload
borrows only inside its own cohort. So each cohort gets one ClusterQueue nobody submits to, whose nominal quota
is what the cohort's teams may borrow beyond their own reservations:
  - the department's own reservation beyond its teams', plus the fabric's unreserved capacity (what no team or
    department reserves, which Gridlane lends to anyone under their limit),
  - never more than the department's limit allows: the cohort's whole quota (its teams' reservations and the
    lending queue) is at most the department's limit, so Kueue holds the department's teams together under it,
    as Gridlane does.
Every cohort sees the same unreserved capacity, so Kueue may let two departments borrow the same GPUs at once:
Gridlane's own admission never does, and the cluster's scheduler still places pods only where they fit.

Quantities are Kubernetes quantity strings: CPUs in milli-CPUs ("500m", or "4" when whole), memory in Mi or Gi
("64Gi"), GPUs in whole units of the fabric's GPU resource (nvidia.com/gpu, a MIG resource, a shared one whose
unit is a quarter). Kueue counts extended resources in whole units, so a reservation, limit or pool that is not
a whole number of units is rounded down, and the rendering carries a note saying so.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fabrics.base import Resources
from fabrics.kubernetes.render import MANAGED_BY, local_queue_name
from fabrics.kubernetes.settings import GpuResource

API_VERSION = "kueue.x-k8s.io/v1beta1"
FABRIC_LABEL = "gridlane.io/fabric"
TEAM_LABEL = "gridlane.io/team"
MANAGER = "gridlane"
NAMESPACE_NAME = "kubernetes.io/metadata.name"  # every namespace carries its own name as this label
NOTHING = Resources(0, 0, 0)
PREEMPTION = {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"}


@dataclass(frozen=True)
class Limits:
    """Caps on concurrent use (milli-GPUs, milli-CPUs, MiB); None: no cap beyond the fabric's size."""

    gpus_milli: int | None = None
    cpus_milli: int | None = None
    memory_mib: int | None = None


@dataclass(frozen=True)
class Team:
    slug: str
    department: str | None
    reservation: Resources = NOTHING
    limit: Limits = Limits()
    namespaces: tuple[str, ...] = ()


@dataclass(frozen=True)
class Department:
    slug: str
    reservation: Resources = NOTHING
    limit: Limits = Limits()


@dataclass(frozen=True)
class Site:
    """One Kueue-owned fabric as Gridlane sees it."""

    fabric_id: str  # the value of the gridlane.io/fabric label: stable when the fabric is renamed
    name: str  # the fabric's name: the start of its ClusterQueues' names and its own cohort
    flavor: str
    gpu: GpuResource
    capacity: Resources
    teams: tuple[Team, ...]
    departments: tuple[Department, ...] = ()
    node_labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Rendered:
    """Objects in the order they are created (flavors, cluster queues, local queues) and notes for IT."""

    objects: list[dict[str, Any]]
    notes: list[str]


def node_labels(selector: str) -> tuple[dict[str, str], list[str]]:
    """The equality terms of a node selector ("gpu=h100,zone=a") as nodeLabels, and a note per term that is not one."""
    labels: dict[str, str] = {}
    notes = []
    for term in filter(None, (t.strip() for t in selector.split(","))):
        key, eq, value = term.partition("==" if "==" in term else "=")
        if not eq or key.endswith("!") or not key.strip():
            notes.append(f"the node selector term {term!r} is not key=value, so the flavor's nodeLabels leave it out")
            continue
        labels[key.strip()] = value.strip()
    return labels, notes


def dns_name(*parts: str) -> str:
    """A DNS label made of the parts (slugs may hold capitals and underscores): at most 63 characters."""
    joined = "-".join(parts)
    name = re.sub(r"[^a-z0-9.-]+", "-", joined.lower()).strip("-.") or "gridlane"
    if len(name) > 63:
        name = f"{name[:54].rstrip('-.')}-{hashlib.sha256(joined.encode()).hexdigest()[:8]}"
    return name


def render(site: Site) -> Rendered:
    """The objects for this fabric; pure."""
    notes: list[str] = []
    flavor = dns_name(site.flavor or site.name)
    with_gpus = bool(site.capacity.gpus_milli or site.flavor)
    covered = ["cpu", "memory"] + ([site.gpu.name] if with_gpus else [])
    labels = {MANAGED_BY: MANAGER, FABRIC_LABEL: site.fabric_id}
    for resource, amount in (("CPUs", site.capacity.cpus_milli), ("memory", site.capacity.memory_mib)):
        if not amount:
            notes.append(f"the fabric's {resource} are not known, so only reserved {resource} can be used in Kueue")

    def quota(what: str, reservation: Resources, limit: Limits | None) -> dict[str, Any]:
        """One ClusterQueue's resource group; limit None: a lending queue (no borrowingLimit)."""
        resources = []
        for resource, amount, cap in _amounts(reservation, limit or Limits(), with_gpus):
            entry: dict[str, Any] = {"name": site.gpu.name if resource == "gpu" else resource}
            entry["nominalQuota"] = _quantity(resource, amount, site.gpu, what, "reservation", notes)
            if limit is not None and cap is not None:
                units = _units(resource, cap, site.gpu, what, "limit", notes)
                nominal = _units(resource, amount, site.gpu, what, "reservation", [])
                entry["borrowingLimit"] = _format(resource, max(0, units - nominal))
            resources.append(entry)
        return {"coveredResources": covered, "flavors": [{"name": flavor, "resources": resources}]}

    def cluster_queue(
        name: str, cohort: str, group: dict[str, Any], namespaces: Sequence[str] | None, team: str
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {"cohort": cohort}
        if namespaces is not None:  # absent: no namespace may submit (a lending queue)
            spec["namespaceSelector"] = {
                "matchExpressions": [{"key": NAMESPACE_NAME, "operator": "In", "values": sorted(namespaces)}]
            }
        spec |= {"resourceGroups": [group], "preemption": dict(PREEMPTION)}
        own = labels | ({TEAM_LABEL: team} if team else {})
        return {
            "apiVersion": API_VERSION,
            "kind": "ClusterQueue",
            "metadata": {"name": name, "labels": own},
            "spec": spec,
        }

    resource_flavor: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": flavor, "labels": dict(labels)},
        "spec": {"nodeLabels": dict(site.node_labels)} if site.node_labels else {},
    }
    departments = {d.slug: d for d in site.departments}
    teams = sorted(site.teams, key=lambda t: t.slug)
    queues, locals_ = [], []
    for team in teams:
        name = dns_name(site.name, team.slug)
        cohort = dns_name(team.department) if team.department else dns_name(site.name)
        if not team.namespaces:
            notes.append(f"{team.slug}: no namespace to submit from, so no LocalQueue")
        group = quota(team.slug, team.reservation, team.limit)
        queues.append(cluster_queue(name, cohort, group, team.namespaces, team.slug))
        for namespace in sorted(team.namespaces):
            locals_.append(
                {
                    "apiVersion": API_VERSION,
                    "kind": "LocalQueue",
                    "metadata": {
                        "name": local_queue_name(team.slug),
                        "namespace": namespace,
                        "labels": labels | {TEAM_LABEL: team.slug},
                    },
                    "spec": {"clusterQueue": name},
                }
            )
    # The lending queues: one per department with teams here, one for the teams without a department.
    unreserved = _unreserved(site)
    cohorts = sorted({t.department for t in teams if t.department})
    for slug in cohorts:
        dept = departments.get(slug, Department(slug))
        members = [t for t in teams if t.department == slug]
        pool = _pool(dept, members, unreserved)
        queues.append(cluster_queue(dns_name(site.name, slug), dns_name(slug), quota(slug, pool, None), None, ""))
    if any(t.department is None for t in teams):
        what = f"{site.name} (unreserved)"
        queues.append(cluster_queue(dns_name(site.name), dns_name(site.name), quota(what, unreserved, None), None, ""))
    return Rendered([resource_flavor, *queues, *locals_], notes)


def _amounts(reservation: Resources, limit: Limits, with_gpus: bool) -> list[tuple[str, int, int | None]]:
    rows = [("cpu", reservation.cpus_milli, limit.cpus_milli), ("memory", reservation.memory_mib, limit.memory_mib)]
    if with_gpus:
        rows.append(("gpu", reservation.gpus_milli, limit.gpus_milli))
    return rows


def _unreserved(site: Site) -> Resources:
    """The fabric's capacity less what its teams and departments reserve (a department's holds its teams')."""
    held = [0, 0, 0]
    by_department: dict[str | None, list[Team]] = {}
    for team in site.teams:
        by_department.setdefault(team.department, []).append(team)
    departments = {d.slug: d for d in site.departments}
    for slug, members in by_department.items():
        own = departments[slug].reservation if slug in departments else NOTHING
        for i, attr in enumerate(("gpus_milli", "cpus_milli", "memory_mib")):
            teams = sum(getattr(t.reservation, attr) for t in members)
            held[i] += teams if slug is None else max(teams, getattr(own, attr))
    cap = site.capacity
    return Resources(
        max(0, cap.gpus_milli - held[0]), max(0, cap.cpus_milli - held[1]), max(0, cap.memory_mib - held[2])
    )


def _pool(dept: Department, members: list[Team], unreserved: Resources) -> Resources:
    """What a department's teams may borrow beyond their reservations: its own reservation beyond theirs and the
    unreserved capacity, held under its limit."""
    amounts = []
    for attr in ("gpus_milli", "cpus_milli", "memory_mib"):
        teams = sum(getattr(t.reservation, attr) for t in members)
        pool = max(0, getattr(dept.reservation, attr) - teams) + getattr(unreserved, attr)
        cap = getattr(dept.limit, attr)
        amounts.append(pool if cap is None else max(0, min(pool, cap - teams)))
    return Resources(*amounts)


def _units(resource: str, amount: int, gpu: GpuResource, what: str, which: str, notes: list[str]) -> int:
    """GPUs in whole units of the GPU resource, rounded down (with a note); CPUs and memory as they are."""
    if resource != "gpu":
        return amount
    units, rest = divmod(amount, gpu.milli_per_unit)
    if rest:
        notes.append(
            f"{what}: the GPU {which} ({amount / 1000:g} GPU) is not a whole number of {gpu.name}; "
            f"Kueue counts whole units, so it is {units}"
        )
    return units


def _quantity(resource: str, amount: int, gpu: GpuResource, what: str, which: str, notes: list[str]) -> Any:
    return _format(resource, _units(resource, amount, gpu, what, which, notes))


def _format(resource: str, amount: int) -> Any:
    """GPUs as integers, milli-CPUs as "500m" (or "4"), MiB as "64Gi" (or "1536Mi")."""
    if resource == "gpu":
        return amount
    if resource == "cpu":
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    if amount == 0:
        return "0"
    return f"{amount // 1024}Gi" if amount % 1024 == 0 else f"{amount}Mi"
