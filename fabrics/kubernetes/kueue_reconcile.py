"""Bring a cluster's Kueue objects in step with what fabrics/kubernetes/kueue.py rendered, and say what differed.

1. List the objects Gridlane manages on this fabric, by label (one LIST per kind the rendering manages).
2. Create what is missing (topology, flavor, priority classes, cohorts, cluster queues, then local queues), patch
   what differs in the fields Gridlane owns (nothing else: Kueue's defaults, its status and other people's labels
   stay), delete the managed objects nothing rendered (local queues first).
3. Report each difference found before the patch, with its cause: Gridlane changed its mind (a quota changed),
   someone changed the object in the cluster, or someone made it by hand with Gridlane's labels.

Gridlane tells its own writes from other people's by an annotation holding the owned fields it last wrote (as
kubectl's last-applied-configuration does). An object of a rendered name that Gridlane does not manage is never
touched: it is reported instead.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

from fabrics.kubernetes.client import KubeError
from fabrics.kubernetes.kueue import FABRIC_LABEL, MANAGER, TEAM_LABEL, Rendered
from fabrics.kubernetes.render import MANAGED_BY

APPLIED = "gridlane.io/applied"
PLURAL = {
    "Topology": "topologies",
    "ResourceFlavor": "resourceflavors",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "Cohort": "cohorts",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
}
ORDER = tuple(PLURAL)  # what is pointed at before what points at it
# The fields Gridlane owns, by kind; each a path into the object. Both versions' cohort field are listed: an object
# holds the one of the version it was read in.
OWNED: dict[str, tuple[tuple[str, ...], ...]] = {
    "Topology": (("spec", "levels"),),
    "ResourceFlavor": (("spec", "nodeLabels"), ("spec", "topologyName")),
    "WorkloadPriorityClass": (("value",), ("description",)),
    "Cohort": (("spec", "parentName"), ("spec", "resourceGroups"), ("spec", "fairSharing")),
    "ClusterQueue": (
        ("spec", "cohort"),
        ("spec", "cohortName"),
        ("spec", "namespaceSelector"),
        ("spec", "resourceGroups"),
        ("spec", "preemption", "reclaimWithinCohort"),
        ("spec", "preemption", "withinClusterQueue"),
        ("spec", "fairSharing"),
    ),
    "LocalQueue": (("spec", "clusterQueue"),),
}
# Fields Kueue's CRDs make immutable (`self == oldSelf`): a change replaces the object.
IMMUTABLE = {"LocalQueue": "spec.clusterQueue", "Topology": "spec.levels"}
LABELS = (MANAGED_BY, FABRIC_LABEL, TEAM_LABEL)

GRIDLANE, EDITED, BY_HAND = "changed in Gridlane", "changed in the cluster", "made by hand"


class KueueApi(Protocol):
    """What the reconciler needs of a client (fabrics.kubernetes.client.KubeClient)."""

    def kueue_list(self, plural: str, selector: str) -> list[dict[str, Any]]: ...
    def kueue_read(self, plural: str, namespace: str, name: str) -> dict[str, Any]: ...
    def kueue_create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]: ...
    def kueue_patch(self, plural: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...
    def kueue_delete(self, plural: str, namespace: str, name: str) -> bool: ...


@dataclass(frozen=True)
class Difference:
    object: str  # "ClusterQueue k8s-vision", "LocalQueue gridlane/gl-vision"
    field: str  # "spec.resourceGroups", "metadata.labels"
    cluster: Any  # None: absent
    gridlane: Any
    cause: str  # GRIDLANE, EDITED or BY_HAND


@dataclass
class Report:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    not_ours: list[str] = field(default_factory=list)  # rendered names held by objects Gridlane does not manage
    notes: list[str] = field(default_factory=list)

    @property
    def drift(self) -> list[Difference]:
        """What someone else did: edits in the cluster and objects made by hand with Gridlane's labels."""
        return [d for d in self.differences if d.cause != GRIDLANE]

    @property
    def drifted(self) -> list[str]:
        """The objects that drifted or could not be managed, each once."""
        return list(dict.fromkeys([d.object for d in self.drift] + self.not_ours))

    def as_dict(self) -> dict[str, Any]:
        return {
            "created": self.created,
            "updated": self.updated,
            "deleted": self.deleted,
            "differences": [d.__dict__ for d in self.differences],
            "not_ours": self.not_ours,
            "notes": self.notes,
        }


def selector(fabric_id: str) -> str:
    return f"{MANAGED_BY}={MANAGER},{FABRIC_LABEL}={fabric_id}"


def reconcile(api: KueueApi, fabric_id: str, rendered: Rendered) -> Report:
    """Make the cluster hold what was rendered; KubeError (a FabricError) when the API fails part way."""
    report = Report(notes=list(rendered.notes))
    # 1. What is there now.
    kinds = [kind for kind in ORDER if kind in rendered.kinds]
    existing = {kind: {_key(o): o for o in api.kueue_list(PLURAL[kind], selector(fabric_id))} for kind in kinds}
    wanted = {(o["kind"], *_key(o)) for o in rendered.objects}
    # 2. Create and patch in dependency order.
    for want in sorted(rendered.objects, key=lambda o: ORDER.index(o["kind"])):
        kind = want["kind"]
        have = existing[kind].get(_key(want))
        if have is None:
            _create(api, want, report)
        else:
            _update(api, have, want, report)
    # 3. Managed objects nothing rendered go, the queues before what they point at.
    for kind in reversed(kinds):
        for key, have in sorted(existing[kind].items()):
            if (kind, *key) in wanted:
                continue
            if APPLIED not in (have["metadata"].get("annotations") or {}):
                report.differences.append(Difference(_name(have), "metadata", "present", None, BY_HAND))
            if api.kueue_delete(PLURAL[kind], *key):
                report.deleted.append(_name(have))
    return report


def _create(api: KueueApi, want: dict[str, Any], report: Report) -> None:
    body = _annotated(want)
    try:
        api.kueue_create(PLURAL[want["kind"]], body)
    except KubeError as error:
        if error.reason != "AlreadyExists":
            raise
        # Not in our list, yet there: someone else's object (or another fabric's) holds the name.
        report.not_ours.append(_name(want))
        return
    report.created.append(_name(want))


def _update(api: KueueApi, have: dict[str, Any], want: dict[str, Any], report: Report) -> None:
    kind, name = want["kind"], _name(want)
    ours, theirs = owned(want), owned(have)
    applied = _applied(have)
    cause = BY_HAND if applied is None else (GRIDLANE if _same(applied) == _same(theirs) else EDITED)
    differences = [
        Difference(name, path, theirs.get(path), ours.get(path), cause)
        for path in ours.keys() | theirs.keys()
        if _same(theirs.get(path)) != _same(ours.get(path))
    ]
    if applied is None and not differences:  # as Gridlane would have it, but not Gridlane's doing
        differences.append(Difference(name, f"metadata.annotations.{APPLIED}", None, "(set by Gridlane)", BY_HAND))
    report.differences += sorted(differences, key=lambda d: d.field)
    if not differences and _same(applied) == _same(ours):
        return
    if kind in IMMUTABLE and any(d.field == IMMUTABLE[kind] for d in differences):
        # That field cannot change (Kueue's CRD makes it immutable): a new object replaces it.
        api.kueue_delete(PLURAL[kind], *_key(have))
        api.kueue_create(PLURAL[kind], _annotated(want))
        report.updated.append(name)
        return
    patch: dict[str, Any] = {"metadata": {"annotations": {APPLIED: _dump(ours)}}}
    for path in OWNED[kind]:
        current, target = _at(have, path), _at(want, path)
        if _same(current) != _same(target):
            _put(patch, path, merge_diff(current, target))
    labels = have["metadata"].get("labels") or {}
    wanted_labels = want["metadata"].get("labels") or {}
    fix = {k: wanted_labels.get(k) for k in LABELS if labels.get(k) != wanted_labels.get(k)}
    if fix:
        patch["metadata"]["labels"] = fix
    api.kueue_patch(PLURAL[kind], *_key(have), patch)
    report.updated.append(name)


def owned(obj: dict[str, Any]) -> dict[str, Any]:
    """The fields Gridlane owns, by dotted path (absent ones left out), and its labels."""
    fields = {".".join(path): value for path in OWNED[obj["kind"]] if (value := _at(obj, path)) is not None}
    labels = obj["metadata"].get("labels") or {}
    for key in LABELS:
        if key in labels:
            fields[f"metadata.labels.{key}"] = labels[key]
    return fields


def merge_diff(current: Any, target: Any) -> Any:
    """The JSON merge patch that turns `current` into `target` (a key the target lacks becomes null)."""
    if not isinstance(current, dict) or not isinstance(target, dict):
        return target
    patch = {key: None for key in current if key not in target}
    for key, value in target.items():
        if key not in current or _same(current[key]) != _same(value):
            patch[key] = merge_diff(current.get(key), value)
    return patch


def _same(value: Any) -> Any:
    """A value with its quantities as numbers, so "8" and 8, "1000m" and "1", "1Gi" and "1024Mi" compare equal."""
    if isinstance(value, dict):
        return {
            k: _quantity(v) if k in ("nominalQuota", "borrowingLimit", "lendingLimit", "weight") else _same(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_same(v) for v in value]
    return value


_SUFFIX: dict[str, Decimal] = {"": Decimal(1), "m": Decimal("0.001")}
_SUFFIX |= {s: Decimal(10) ** (3 * (i + 1)) for i, s in enumerate(("k", "M", "G", "T", "P"))}
_SUFFIX |= {s: Decimal(2) ** (10 * (i + 1)) for i, s in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi"))}


def _quantity(value: Any) -> Any:
    text = str(value).strip()
    number = text.rstrip("kKMGTPimu")
    try:
        return Decimal(number) * _SUFFIX[text[len(number) :]]
    except (KeyError, InvalidOperation):
        return value


def _at(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def _put(patch: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for part in path[:-1]:
        patch = patch.setdefault(part, {})
    patch[path[-1]] = value


def _applied(obj: dict[str, Any]) -> dict[str, Any] | None:
    text = (obj["metadata"].get("annotations") or {}).get(APPLIED)
    try:
        applied = json.loads(text) if text else None
    except ValueError:
        return None
    return applied if isinstance(applied, dict) else None


def _dump(fields: dict[str, Any]) -> str:
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def _annotated(want: dict[str, Any]) -> dict[str, Any]:
    meta = dict(want["metadata"])
    meta["annotations"] = dict(meta.get("annotations") or {}) | {APPLIED: _dump(owned(want))}
    return want | {"metadata": meta}


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _name(obj: dict[str, Any]) -> str:
    namespace, name = _key(obj)
    return f"{obj['kind']} {namespace}/{name}" if namespace else f"{obj['kind']} {name}"
