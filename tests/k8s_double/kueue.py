"""What Kueue's CRDs (kueue.x-k8s.io/v1beta1, as of Kueue 0.9) and its webhooks say about ClusterQueues,
LocalQueues and ResourceFlavors: the schema's checks and CEL rules, its defaults, and the status its
controller writes once it has seen a queue.

Messages are the API server's: a schema pattern says `in body should match`, a CEL rule says its message on
the field it sits on (`spec: Invalid value: "object": ...`).
"""

from __future__ import annotations

from typing import Any

from tests.k8s_double.objects import DNS_SUBDOMAIN, label_key_error, label_value_error, now_rfc3339, quantity

Causes = list[tuple[str, str]]

QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
RECLAIM = ("Never", "LowerPriority", "Any")
WITHIN = ("Never", "LowerPriority", "LowerOrNewerEqualPriority")


def validate(kind: str, obj: dict[str, Any]) -> Causes:
    spec = obj.get("spec") or {}
    if kind == "ClusterQueue":
        return _cluster_queue(spec)
    if kind == "LocalQueue":
        if not spec.get("clusterQueue"):
            return [("spec.clusterQueue", "Required value")]
        return []
    if kind == "ResourceFlavor":
        labels = spec.get("nodeLabels") or {}
        causes: Causes = []
        if len(labels) > 8:
            causes.append(("spec.nodeLabels", f"Too many: {len(labels)}: must have at most 8 items"))
        for key, value in labels.items():
            if (error := label_key_error(key)) is not None:
                causes.append(("spec.nodeLabels", f'Invalid value: "{key}": {error}'))
            if (error := label_value_error(value)) is not None:
                causes.append(("spec.nodeLabels", f'Invalid value: "{value}": {error}'))
        return causes
    return []


def immutable(kind: str, old: dict[str, Any], new: dict[str, Any]) -> Causes:
    """The CEL rule `self == oldSelf` on a LocalQueue's clusterQueue."""
    if kind == "LocalQueue":
        before, after = (old.get("spec") or {}).get("clusterQueue"), (new.get("spec") or {}).get("clusterQueue")
        if before != after:
            return [("spec.clusterQueue", 'Invalid value: "string": field is immutable')]
    return []


def _cluster_queue(spec: dict[str, Any]) -> Causes:
    causes: Causes = []
    cohort = spec.get("cohort")
    if cohort is not None and (not isinstance(cohort, str) or len(cohort) > 253 or not DNS_SUBDOMAIN.match(cohort)):
        causes.append(
            (
                "spec.cohort",
                f'Invalid value: "{cohort}": spec.cohort in body should match '
                "'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
            )
        )
    groups = spec.get("resourceGroups") or []
    if len(groups) > 16:
        causes.append(("spec.resourceGroups", f"Too many: {len(groups)}: must have at most 16 items"))
    borrowing = False
    for g, group in enumerate(groups):
        where = f"spec.resourceGroups[{g}]"
        covered = group.get("coveredResources") or []
        if not covered:
            causes.append((f"{where}.coveredResources", "Required value"))
        flavors = group.get("flavors") or []
        if not flavors:
            causes.append((f"{where}.flavors", "Required value"))
        if any(len(f.get("resources") or []) != len(covered) for f in flavors):
            causes.append(
                (
                    where,
                    'Invalid value: "object": flavors must have the same number of resources as the coveredResources',
                )
            )
        for f, flavor in enumerate(flavors):
            for r, resource in enumerate(flavor.get("resources") or []):
                at = f"{where}.flavors[{f}].resources[{r}]"
                if r < len(covered) and resource.get("name") != covered[r]:
                    causes.append(
                        (f"{at}.name", f'Invalid value: "{resource.get("name")}": must match coveredResources')
                    )
                for field in ("nominalQuota", "borrowingLimit", "lendingLimit"):
                    if field not in resource:
                        if field == "nominalQuota":
                            causes.append((f"{at}.nominalQuota", "Required value"))
                        continue
                    borrowing = borrowing or field == "borrowingLimit"
                    value = resource[field]
                    try:
                        negative = quantity(value) < 0
                    except ValueError:
                        causes.append(
                            (
                                f"{at}.{field}",
                                f"Invalid value: \"{value}\": {at}.{field} in body should match '{QUANTITY_PATTERN}'",
                            )
                        )
                        continue
                    if negative:
                        causes.append(
                            (f"{at}.{field}", f'Invalid value: "{value}": must be greater than or equal to 0')
                        )
    if borrowing and not cohort:
        causes.append(("spec", 'Invalid value: "object": borrowingLimit must be nil when cohort is empty'))
    preemption = spec.get("preemption") or {}
    for field, allowed in (("reclaimWithinCohort", RECLAIM), ("withinClusterQueue", WITHIN)):
        value = preemption.get(field)
        if value is not None and value not in allowed:
            supported = ", ".join(f'"{a}"' for a in allowed)
            causes.append((f"spec.preemption.{field}", f'Unsupported value: "{value}": supported values: {supported}'))
    return causes


def default(kind: str, obj: dict[str, Any], *, created: bool) -> None:
    """The CRD's defaults (on every write) and, on create, the status Kueue's controller writes."""
    spec = obj.setdefault("spec", {})
    if kind == "ClusterQueue":
        spec.setdefault("queueingStrategy", "BestEffortFIFO")
        spec.setdefault("stopPolicy", "None")
        spec.setdefault("flavorFungibility", {"whenCanBorrow": "Borrow", "whenCanPreempt": "TryNextFlavor"})
        preemption = spec.setdefault("preemption", {})
        preemption.setdefault("borrowWithinCohort", {"policy": "Never"})
        preemption.setdefault("reclaimWithinCohort", "Never")
        preemption.setdefault("withinClusterQueue", "Never")
    elif kind == "LocalQueue":
        spec.setdefault("stopPolicy", "None")
    if created and kind in ("ClusterQueue", "LocalQueue"):
        obj["status"] = {
            "conditions": [
                {
                    "type": "Active",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Can admit new workloads"
                    if kind == "ClusterQueue"
                    else "Can submit new workloads to localQueue",
                    "lastTransitionTime": now_rfc3339(),
                    "observedGeneration": 1,
                }
            ],
            "pendingWorkloads": 0,
            "reservingWorkloads": 0,
            "admittedWorkloads": 0,
        }
