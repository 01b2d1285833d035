"""Pure rendering of the Kueue objects that make a cluster enforce Gridlane's quotas, in the Kueue API version the
cluster serves (read from API discovery by the client: kueue.x-k8s.io/v1beta2 from Kueue 0.15, v1beta1 before;
Kueue 0.20 stops serving v1beta1 and 0.21 removes it).

From a plain description of one fabric (its flavor, capacity, departments and teams with their reservation,
limit and fair-share weight there) to the objects Kueue expects, each labelled managed-by gridlane and with the
fabric's id. Under v1beta2:

    Topology               <fabric>         levels from IT's node labels (rack, block, host), when set
    ResourceFlavor         <flavor>         nodeLabels from the fabric's node_selector (its equality terms)
    WorkloadPriorityClass  <name>           one per priority IT names on the fabric (the tiers' class names)
    Cohort                 <fabric>         the root: the fabric's unreserved capacity (what no team or department
                                            reserves, which Gridlane lends to anyone under their limit)
    Cohort                 <dept>           parentName <fabric>; nominalQuota = the department's reservation beyond
                                            its teams', borrowingLimit = what its limit leaves beyond that; its weight
    ClusterQueue           <fabric>-<team>  cohortName = the team's department, else <fabric>; nominalQuota =
                                            reservation, borrowingLimit = limit - reservation; fairSharing.weight
    LocalQueue             gl-<team>        in each namespace the team's work runs in, to its ClusterQueue

Under v1beta1 a cohort is only a name (`spec.cohort`) and may hold no quota on the clusters still serving only
v1beta1, so each cohort instead gets a lending ClusterQueue nobody submits to, whose nominal quota is what the
cohort's teams may borrow beyond their own reservations (the department's own reservation beyond its teams', plus
the unreserved capacity, held under the department's limit). Every such cohort sees the same unreserved capacity,
so Kueue may let two departments borrow the same GPUs at once: Gridlane's own admission never does, and the
cluster's scheduler still places pods only where they fit. v1beta2's cohort tree has no such overlap.

Quantities are Kubernetes quantity strings: CPUs in milli-CPUs ("500m", or "4" when whole), memory in Mi or Gi
("64Gi"), GPUs in whole units of the fabric's GPU resource (nvidia.com/gpu, a MIG resource, a shared one whose
unit is a quarter). Kueue counts extended resources in whole units, so a reservation, limit or pool that is not
a whole number of units is rounded down, and the rendering carries a note saying so.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from fabrics.base import Resources
from fabrics.kubernetes.render import MANAGED_BY, local_queue_name
from fabrics.kubernetes.settings import GpuResource

GROUP = "kueue.x-k8s.io"
V1BETA2, V1BETA1 = "v1beta2", "v1beta1"
API_VERSION = f"{GROUP}/{V1BETA2}"
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
    weight: float = 1.0  # its fair-share weight (ResourceGroup.fair_share_weight)


@dataclass(frozen=True)
class Department:
    slug: str
    reservation: Resources = NOTHING
    limit: Limits = Limits()
    weight: float = 1.0


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
    version: str = V1BETA2  # the Kueue API version the cluster serves (client.KubeClient.kueue_version)
    priorities: tuple[tuple[str, int], ...] = ()  # WorkloadPriorityClasses: (name, value)
    topology: tuple[str, ...] = ()  # node labels of the topology levels, widest first (v1beta2 only)


@dataclass(frozen=True)
class Rendered:
    """Objects in the order they are created and notes for IT; `kinds`: every kind this rendering manages (the
    reconciler lists each of them, so what is no longer rendered is deleted)."""

    objects: list[dict[str, Any]]
    notes: list[str]
    kinds: tuple[str, ...] = ("ResourceFlavor", "ClusterQueue", "LocalQueue")


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
    """The objects for this fabric, in the site's Kueue version; pure."""
    r = _Renderer(site)
    for resource, amount in (("CPUs", site.capacity.cpus_milli), ("memory", site.capacity.memory_mib)):
        if not amount:
            r.notes.append(f"the fabric's {resource} are not known, so only reserved {resource} can be used in Kueue")
    teams = sorted(site.teams, key=lambda t: t.slug)
    flavor_spec: dict[str, Any] = {"nodeLabels": dict(site.node_labels)} if site.node_labels else {}
    if r.v2 and site.topology and site.node_labels:  # Kueue wants a flavor with a topology to name its nodes
        flavor_spec["topologyName"] = dns_name(site.name)
    elif r.v2 and site.topology:
        r.notes.append("topology-aware scheduling needs a node_selector naming the flavor's nodes: none is used")
    head = [*r.topology(), r.obj("ResourceFlavor", r.flavor, flavor_spec)]
    head += [r.priority_class(name, value) for name, value in site.priorities]
    tree = r.cohorts(teams) if r.v2 else []
    queues, locals_ = [], []
    for team in teams:
        name = dns_name(site.name, team.slug)
        cohort = dns_name(team.department) if team.department else dns_name(site.name)
        if not team.namespaces:
            r.notes.append(f"{team.slug}: no namespace to submit from, so no LocalQueue")
        queues.append(r.cluster_queue(name, cohort, r.quota(team.slug, team.reservation, team.limit), team))
        for namespace in sorted(team.namespaces):
            meta = {"namespace": namespace, "labels": r.labels | {TEAM_LABEL: team.slug}}
            locals_.append(r.obj("LocalQueue", local_queue_name(team.slug), {"clusterQueue": name}, meta))
    if not r.v2:
        queues += r.lending_queues(teams)
    kinds: tuple[str, ...] = ("Topology", "ResourceFlavor", "WorkloadPriorityClass", "Cohort", "ClusterQueue")
    kinds = (
        (*kinds, "LocalQueue") if r.v2 else ("ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue", "LocalQueue")
    )
    return Rendered([*head, *tree, *queues, *locals_], r.notes, kinds)


class _Renderer:
    """One rendering's shared parts: the version, labels, flavor, covered resources and the notes it gathers."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.v2 = site.version == V1BETA2
        self.api_version = f"{GROUP}/{site.version}"
        self.notes: list[str] = []
        self.flavor = dns_name(site.flavor or site.name)
        self.with_gpus = bool(site.capacity.gpus_milli or site.flavor)
        self.covered = ["cpu", "memory"] + ([site.gpu.name] if self.with_gpus else [])
        self.labels = {MANAGED_BY: MANAGER, FABRIC_LABEL: site.fabric_id}
        self.unreserved = _unreserved(site)

    def obj(self, kind: str, name: str, spec: dict[str, Any] | None, meta: dict[str, Any] | None = None) -> Any:
        body: dict[str, Any] = {"apiVersion": self.api_version, "kind": kind}
        body["metadata"] = {"name": name, "labels": dict(self.labels)} | (meta or {})
        if spec is not None:
            body["spec"] = spec
        return body

    def quota(self, what: str, reservation: Resources, limit: Limits | None) -> dict[str, Any]:
        """One resource group; limit None: no borrowingLimit (a lending queue, the root cohort)."""
        resources = []
        for resource, amount, cap in _amounts(reservation, limit or Limits(), self.with_gpus):
            gpu = self.site.gpu
            entry: dict[str, Any] = {"name": gpu.name if resource == "gpu" else resource}
            entry["nominalQuota"] = _quantity(resource, amount, gpu, what, "reservation", self.notes)
            if limit is not None and cap is not None:
                units = _units(resource, cap, gpu, what, "limit", self.notes)
                nominal = _units(resource, amount, gpu, what, "reservation", [])
                entry["borrowingLimit"] = _format(resource, max(0, units - nominal))
            resources.append(entry)
        return {"coveredResources": self.covered, "flavors": [{"name": self.flavor, "resources": resources}]}

    def cluster_queue(self, name: str, cohort: str, group: dict[str, Any], team: Team | None) -> Any:
        """A team's ClusterQueue (team None: a v1beta1 lending queue, which no namespace may submit to)."""
        spec: dict[str, Any] = {"cohortName" if self.v2 else "cohort": cohort}
        if team is not None:
            spec["namespaceSelector"] = {
                "matchExpressions": [{"key": NAMESPACE_NAME, "operator": "In", "values": sorted(team.namespaces)}]
            }
        spec |= {"resourceGroups": [group], "preemption": dict(PREEMPTION)}
        if team is not None:
            spec["fairSharing"] = {"weight": _weight(team.weight)}
        meta = {"labels": self.labels | ({TEAM_LABEL: team.slug} if team is not None else {})}
        return self.obj("ClusterQueue", name, spec, meta)

    def cohorts(self, teams: list[Team]) -> list[dict[str, Any]]:
        """v1beta2: the root cohort holding the unreserved capacity, and each department's under it."""
        site, departments = self.site, {d.slug: d for d in self.site.departments}
        root = dns_name(site.name)
        what = f"{site.name} (unreserved)"
        tree = [self.obj("Cohort", root, {"resourceGroups": [self.quota(what, self.unreserved, None)]})]
        for slug in sorted({t.department for t in teams if t.department}):
            dept = departments.get(slug, Department(slug))
            members = [t for t in teams if t.department == slug]
            own, limit = _own(dept, members)
            spec = {"parentName": root, "resourceGroups": [self.quota(slug, own, limit)]}
            tree.append(self.obj("Cohort", dns_name(slug), spec | {"fairSharing": {"weight": _weight(dept.weight)}}))
        return tree

    def lending_queues(self, teams: list[Team]) -> list[dict[str, Any]]:
        """v1beta1: one lending ClusterQueue per department with teams here, one for the teams without one."""
        site, departments, queues = self.site, {d.slug: d for d in self.site.departments}, []
        for slug in sorted({t.department for t in teams if t.department}):
            dept = departments.get(slug, Department(slug))
            pool = _pool(dept, [t for t in teams if t.department == slug], self.unreserved)
            queues.append(
                self.cluster_queue(dns_name(site.name, slug), dns_name(slug), self.quota(slug, pool, None), None)
            )
        if any(t.department is None for t in teams):
            group = self.quota(f"{site.name} (unreserved)", self.unreserved, None)
            queues.append(self.cluster_queue(dns_name(site.name), dns_name(site.name), group, None))
        return queues

    def priority_class(self, name: str, value: int) -> Any:
        body = self.obj("WorkloadPriorityClass", dns_name(name), None)
        return body | {"value": value, "description": f"Gridlane priority {name}"}

    def topology(self) -> list[dict[str, Any]]:
        """v1beta2 with topology levels: the Topology the flavor names (and its topologyName is set by render)."""
        if not self.site.topology:
            return []
        if not self.v2:
            self.notes.append("topology levels need Kueue's v1beta2 API: this cluster serves v1beta1, so none is made")
            return []
        levels = [{"nodeLabel": label} for label in self.site.topology]
        return [self.obj("Topology", dns_name(self.site.name), {"levels": levels})]


def _weight(weight: float) -> str:
    """A fair-share weight as a quantity ("1", "1.5")."""
    return f"{weight:g}"


def _own(dept: Department, members: list[Team]) -> tuple[Resources, Limits]:
    """A department cohort's own quota: its reservation beyond its teams', and what its limit lets it borrow beyond
    its subtree (its teams' reservations and its own)."""
    own, caps = [], []
    for attr in ("gpus_milli", "cpus_milli", "memory_mib"):
        teams = sum(getattr(t.reservation, attr) for t in members)
        mine = max(0, getattr(dept.reservation, attr) - teams)
        own.append(mine)
        cap = getattr(dept.limit, attr)
        caps.append(None if cap is None else max(0, cap - teams))  # quota() takes away the nominal
    return Resources(*own), Limits(*caps)


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
