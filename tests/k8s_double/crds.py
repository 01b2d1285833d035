"""Kueue's released CustomResourceDefinitions, read at run time, as an API server serves and enforces them.

The CRDs are Kueue v0.19.2's, unchanged, in `../shared/kueue-crds/` beside the repository (GRIDLANE_KUEUE_CRDS
names another folder). Nothing of them is copied here: each file's `spec.versions[]` says which versions are
served and which one is stored, and each version's `openAPIV3Schema` (structural) is what a write must satisfy.

What the double enforces, as kube-apiserver 1.31 does for a structural schema:
  - `type` (object, array, string, integer, number, boolean), `x-kubernetes-int-or-string`, `anyOf` of types;
  - `properties`: a field the schema does not name is an unknown field (pruned, or a 400 under
    fieldValidation=Strict), except under `x-kubernetes-preserve-unknown-fields` and `additionalProperties`;
  - `required`, `enum`, `pattern`, `minLength`/`maxLength`, `minItems`/`maxItems`, `minimum`/`maximum`,
    `maxProperties`; `default`s are filled in where the parent object is present;
  - `x-kubernetes-validations`: the CEL rules listed in RULES (every rule on the six kinds Gridlane writes) are
    evaluated, transition rules (`oldSelf`) on updates only; any other rule is skipped and counted in SKIPPED.
Not enforced: `format`, `x-kubernetes-list-type` uniqueness, ObjectMeta beyond what validation.py checks.
Conversion between served versions is modelled for the one renamed field Gridlane writes (ClusterQueue
`spec.cohort` in v1beta1, `spec.cohortName` in v1beta2); every other field reads the same in both.
"""

from __future__ import annotations

import copy
import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

Causes = list[tuple[str, str]]
GROUP = "kueue.x-k8s.io"
UPSTREAM = "Kueue v0.19.2 (config/components/crd/bases)"
RELEASE = {"v0.19": ("v1beta1", "v1beta2"), "v0.20": ("v1beta2",), "v1beta1-only": ("v1beta1",), "none": ()}


def folder() -> Path:
    """Where the CRDs are: GRIDLANE_KUEUE_CRDS, else `shared/kueue-crds` beside the repository."""
    given = os.environ.get("GRIDLANE_KUEUE_CRDS")
    return Path(given) if given else Path(__file__).resolve().parents[3] / "shared" / "kueue-crds"


@functools.lru_cache(maxsize=1)
def load() -> dict[str, dict[str, Any]]:
    """Each CRD by its plural: {"kind", "plural", "namespaced", "versions": {name: schema}, "served", "storage"}."""
    crds: dict[str, dict[str, Any]] = {}
    for path in sorted(folder().glob(f"{GROUP}_*.yaml")):
        doc = yaml.safe_load(path.read_text())
        spec = doc["spec"]
        versions = {v["name"]: v["schema"]["openAPIV3Schema"] for v in spec["versions"]}
        crds[spec["names"]["plural"]] = {
            "kind": spec["names"]["kind"],
            "plural": spec["names"]["plural"],
            "namespaced": spec["scope"] == "Namespaced",
            "versions": versions,
            "served": tuple(v["name"] for v in spec["versions"] if v["served"]),
            "storage": next(v["name"] for v in spec["versions"] if v["storage"]),
            "status": {v["name"]: "status" in (v.get("subresources") or {}) for v in spec["versions"]},
        }
    if not crds:
        raise FileNotFoundError(f"no Kueue CRDs in {folder()} (GRIDLANE_KUEUE_CRDS names the folder)")
    return crds


def schema(plural: str, version: str) -> dict[str, Any]:
    return dict(load()[plural]["versions"][version])


def convert(kind: str, obj: dict[str, Any], version: str) -> dict[str, Any]:
    """The object as read through `version` (Kueue's conversion, for the fields Gridlane writes)."""
    out = dict(obj)
    out["apiVersion"] = f"{GROUP}/{version}"
    spec = obj.get("spec")
    if kind == "ClusterQueue" and isinstance(spec, dict):
        spec = dict(spec)
        old, new = ("cohortName", "cohort") if version == "v1beta1" else ("cohort", "cohortName")
        if old in spec:
            spec[new] = spec.pop(old)
        out["spec"] = spec
    return out


# -- structural schema ------------------------------------------------------------------------------

SKIPPED: set[str] = set()  # rules the double met and cannot evaluate


class Checker:
    """One object against one version's schema: causes (422), unknown fields (pruned or 400), defaults filled."""

    def __init__(self, old: dict[str, Any] | None = None) -> None:
        self.causes: Causes = []
        self.unknown: list[str] = []
        self.old = old

    def check(self, node: Any, sch: dict[str, Any], path: str, old: Any = None) -> Any:
        """The node with unknown fields dropped and defaults filled; problems recorded on self."""
        if not self._typed(node, sch, path):
            return node
        if isinstance(node, dict):
            node = self._object(node, sch, path, old)
        elif isinstance(node, list):
            item = sch.get("items") or {}
            node = [self.check(v, item, f"{path}[{i}]") for i, v in enumerate(node)]
            self._bounds(len(node), sch, path, "minItems", "maxItems", "items")
        elif isinstance(node, str):
            self._string(node, sch, path)
        elif isinstance(node, int | float) and not isinstance(node, bool):
            self._number(node, sch, path)
        if "enum" in sch and node not in sch["enum"]:
            allowed = ", ".join(f'"{v}"' for v in sch["enum"])
            self.causes.append((path, f'Unsupported value: "{node}": supported values: {allowed}'))
        for rule in sch.get("x-kubernetes-validations") or []:
            self._rule(rule, node, old, path)
        return node

    def _typed(self, node: Any, sch: dict[str, Any], path: str) -> bool:
        wanted = _types(sch)
        if not wanted or _json_type(node) in wanted or (node is None and sch.get("nullable")):
            return True
        if "number" in wanted and _json_type(node) == "integer":
            return True
        found = _json_type(node)
        want = " or ".join(sorted(wanted))
        self.causes.append((path, f'Invalid value: "{found}": {path} in body must be of type {want}: "{found}"'))
        return False

    def _object(self, node: dict[str, Any], sch: dict[str, Any], path: str, old: Any) -> dict[str, Any]:
        props = sch.get("properties")
        extra = sch.get("additionalProperties")
        keep_all = sch.get("x-kubernetes-preserve-unknown-fields") or (props is None and extra is None)
        out: dict[str, Any] = {}
        olds = old if isinstance(old, dict) else {}
        for key, value in node.items():
            at = f"{path}.{key}" if path else key
            if props is not None and key in props:
                out[key] = self.check(value, props[key], at, olds.get(key))
            elif isinstance(extra, dict):
                out[key] = self.check(value, extra, at, olds.get(key))
            elif keep_all or (not path and key in ("apiVersion", "kind", "metadata")):
                out[key] = value
            else:
                self.unknown.append(at)
        for key, sub in (props or {}).items():
            if key not in out and "default" in sub:  # defaulted before validation, its own defaults included
                out[key] = self.check(copy.deepcopy(sub["default"]), sub, f"{path}.{key}" if path else key)
        for key in sch.get("required") or []:
            if key not in out:
                self.causes.append((f"{path}.{key}" if path else key, "Required value"))
        self._bounds(len(out), sch, path, "minProperties", "maxProperties", "properties")
        return out

    def _string(self, node: str, sch: dict[str, Any], path: str) -> None:
        self._bounds(len(node), sch, path, "minLength", "maxLength", "characters")
        pattern = sch.get("pattern")
        if pattern and not re.search(pattern, node):
            self.causes.append((path, f"Invalid value: \"{node}\": {path} in body should match '{pattern}'"))

    def _number(self, node: float, sch: dict[str, Any], path: str) -> None:
        if "minimum" in sch and node < sch["minimum"]:
            self.causes.append((path, f"Invalid value: {node}: {path} in body should be greater than or equal to "
                                      f"{sch['minimum']}"))  # fmt: skip
        if "maximum" in sch and node > sch["maximum"]:
            self.causes.append((path, f"Invalid value: {node}: {path} in body should be less than or equal to "
                                      f"{sch['maximum']}"))  # fmt: skip

    def _bounds(self, n: int, sch: dict[str, Any], path: str, low: str, high: str, what: str) -> None:
        if low in sch and n < sch[low]:
            self.causes.append((path, f"Invalid value: {n}: {path} in body should have at least {sch[low]} {what}"))
        if high in sch and n > sch[high]:
            self.causes.append((path, f"Too many: {n}: must have at most {sch[high]} {what}"))

    def _rule(self, rule: dict[str, Any], node: Any, old: Any, path: str) -> None:
        text = " ".join(str(rule.get("rule", "")).split())
        evaluate = RULES.get(text)
        if evaluate is None:
            SKIPPED.add(text)
            return
        transition = "oldSelf" in text
        if transition and old is None:
            return  # a transition rule holds on create
        if not evaluate(node, old):
            message = rule.get("message") or f"failed rule: {text}"
            self.causes.append((path or "<root>", f'Invalid value: "{_json_type(node)}": {message}'))


def _types(sch: dict[str, Any]) -> set[str]:
    if sch.get("x-kubernetes-int-or-string"):
        return {"integer", "string"}
    if "anyOf" in sch:
        return {t for alt in sch["anyOf"] for t in _types(alt)}
    return {sch["type"]} if "type" in sch else set()


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return {dict: "object", list: "array", str: "string", type(None): "null"}.get(type(value), "string")


def _has(obj: Any, key: str) -> bool:
    return isinstance(obj, dict) and key in obj


def _no_borrowing(spec: dict[str, Any], cohort_field: str) -> bool:
    if _has(spec, cohort_field) or not _has(spec, "resourceGroups"):
        return True
    return all(
        not _has(r, "borrowingLimit")
        for rg in spec["resourceGroups"]
        for f in rg.get("flavors") or []
        for r in f.get("resources") or []
    )


def _unique(items: list[Any]) -> bool:
    return all(items.count(i) == 1 for i in items)


def _hostname_last(levels: list[dict[str, Any]]) -> bool:
    hostnames = [x for x in levels if x.get("nodeLabel") == "kubernetes.io/hostname"]
    return not hostnames or levels[-1].get("nodeLabel") == "kubernetes.io/hostname"


Rule = Callable[[Any, Any], bool]
# The CEL rules of the kinds Gridlane writes, by their text (whitespace collapsed), as Python.
RULES: dict[str, Rule] = {
    "self == oldSelf": lambda s, o: s == o,
    "self.flavors.all(x, size(x.resources) == size(self.coveredResources))": lambda s, o: all(
        len(f.get("resources") or []) == len(s.get("coveredResources") or []) for f in s.get("flavors") or []
    ),
    "!has(self.cohort) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, "
    "f.resources.all(r, !has(r.borrowingLimit)))) : true": lambda s, o: _no_borrowing(s, "cohort"),
    "!has(self.cohortName) && has(self.resourceGroups) ? self.resourceGroups.all(rg, rg.flavors.all(f, "
    "f.resources.all(r, !has(r.borrowingLimit)))) : true": lambda s, o: _no_borrowing(s, "cohortName"),
    "!has(self.preference) || (self.whenCanBorrow == 'TryNextFlavor' && self.whenCanPreempt == 'TryNextFlavor')": (
        lambda s, o: (
            not _has(s, "preference")
            or (s.get("whenCanBorrow") == "TryNextFlavor" and s.get("whenCanPreempt") == "TryNextFlavor")
        )
    ),
    "!(self.reclaimWithinCohort == 'Never' && has(self.borrowWithinCohort) && self.borrowWithinCohort.policy != "
    "'Never')": lambda s, o: (
        not (
            s.get("reclaimWithinCohort") == "Never"
            and _has(s, "borrowWithinCohort")
            and s["borrowWithinCohort"].get("policy") != "Never"
        )
    ),
    "size(self.filter(i, size(self.filter(j, j == i)) > 1)) == 0": lambda s, o: _unique(s),
    "size(self.filter(i, i.nodeLabel == 'kubernetes.io/hostname')) == 0 || self[size(self) - 1].nodeLabel == "
    "'kubernetes.io/hostname'": lambda s, o: _hostname_last(s),
    "!has(self.topologyName) || self.nodeLabels.size() >= 1": lambda s, o: (
        not _has(s, "topologyName") or len(s.get("nodeLabels") or {}) >= 1
    ),
}
# A ResourceFlavor's tolerations and, once it names a topology, what may no longer change.
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _frozen_with_topology(field: str) -> Rule:
    return lambda s, o: not _has(o, "topologyName") or s.get(field) == o.get(field)


RULES |= {
    "self.all(x, x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": lambda s, o: all(
        x.get("effect") in _EFFECTS for x in s
    ),
    "self.all(x, !has(x.key) ? x.operator == 'Exists' : true)": lambda s, o: all(
        _has(x, "key") or x.get("operator") == "Exists" for x in s
    ),
    "self.all(x, has(x.tolerationSeconds) ? x.effect == 'NoExecute' : true)": lambda s, o: all(
        not _has(x, "tolerationSeconds") or x.get("effect") == "NoExecute" for x in s
    ),
    "self.all(x, !has(x.operator) || x.operator in ['Equal', 'Exists'])": lambda s, o: all(
        x.get("operator", "Equal") in ("Equal", "Exists") for x in s
    ),
    "self.all(x, has(x.operator) && x.operator == 'Exists' ? !has(x.value) : true)": lambda s, o: all(
        x.get("operator") != "Exists" or not _has(x, "value") for x in s
    ),
    "self.all(x, !has(x.effect) || x.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute'])": lambda s, o: all(
        x.get("effect", "NoSchedule") in _EFFECTS for x in s
    ),
    "!has(oldSelf.topologyName) || (has(self.nodeLabels) == has(oldSelf.nodeLabels) && (!has(self.nodeLabels) || "
    "self.nodeLabels == oldSelf.nodeLabels))": _frozen_with_topology("nodeLabels"),
    "!has(oldSelf.topologyName) || (has(self.tolerations) == has(oldSelf.tolerations) && (!has(self.tolerations) "
    "|| self.tolerations == oldSelf.tolerations))": _frozen_with_topology("tolerations"),
    "!has(oldSelf.topologyName) || (has(self.topologyName) && self.topologyName == oldSelf.topologyName)": (
        _frozen_with_topology("topologyName")
    ),
}
