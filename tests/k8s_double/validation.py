"""Validation and defaulting on create, as the API server does it for the fields Gridlane sends.

Each check names its field the way the API server does (`spec.template.spec.containers[0].image`),
so a 422 from the double reads like one from a cluster.
"""

from __future__ import annotations

import uuid
from typing import Any

from tests.k8s_double.objects import (
    DNS_1035,
    DNS_LABEL,
    DNS_SUBDOMAIN,
    Kind,
    label_key_error,
    label_value_error,
    quantity,
)

Causes = list[tuple[str, str]]

_NATIVE_RESOURCES = {"cpu", "memory", "ephemeral-storage", "pods"}


def _is_extended(resource: str) -> bool:
    """nvidia.com/gpu and friends: integer-only, never overcommitted (requests must equal limits)."""
    return "/" in resource and not resource.startswith(("kubernetes.io/", "requests.", "hugepages-"))


def validate(kind: Kind, obj: dict[str, Any]) -> Causes:
    causes: Causes = []
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    if not name:
        causes.append(("metadata.name", "Required value: name or generateName is required"))
    elif kind.kind == "Service" and (len(name) > 63 or not DNS_1035.match(name)):
        causes.append(
            (
                "metadata.name",
                f'Invalid value: "{name}": a DNS-1035 label must consist of lower case alphanumeric characters '
                "or '-', start with an alphabetic character, and end with an alphanumeric character",
            )
        )
    elif len(name) > 253 or not DNS_SUBDOMAIN.match(name):
        causes.append(
            (
                "metadata.name",
                f'Invalid value: "{name}": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
                "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
                "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            )
        )
    causes += _labels(meta.get("labels"), "metadata.labels")
    if kind.kind == "Job":
        causes += _job(obj)
    elif kind.kind == "Pod":
        causes += _pod_spec(obj.get("spec") or {}, "spec")
    elif kind.kind == "Service":
        causes += _service(obj.get("spec") or {})
    elif kind.kind == "PodGroup":
        min_member = (obj.get("spec") or {}).get("minMember", 0)
        if not isinstance(min_member, int) or min_member < 0:
            causes.append(("spec.minMember", f"Invalid value: {min_member!r}: must be greater than or equal to 0"))
    return causes


def _labels(labels: Any, field: str) -> Causes:
    causes: Causes = []
    for key, value in (labels or {}).items():
        if (error := label_key_error(key)) is not None:
            causes.append((field, f'Invalid value: "{key}": {error}'))
        if (error := label_value_error(value)) is not None:
            causes.append((f"{field}", f'Invalid value: "{value}": {error}'))
    return causes


def _job(obj: dict[str, Any]) -> Causes:
    spec = obj.get("spec") or {}
    name = (obj.get("metadata") or {}).get("name", "")
    causes: Causes = []
    if len(name) > 63:
        # The Job controller labels its pods with job-name=<name>: a label value caps at 63.
        causes.append(("spec.template.labels", f'Invalid value: "{name}": must be no more than 63 characters'))
    for field in ("parallelism", "completions", "backoffLimit", "ttlSecondsAfterFinished"):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or value < 0):
            causes.append((f"spec.{field}", f"Invalid value: {value!r}: must be greater than or equal to 0"))
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and (not isinstance(deadline, int) or deadline <= 0):
        causes.append(("spec.activeDeadlineSeconds", f"Invalid value: {deadline!r}: must be greater than 0"))
    mode = spec.get("completionMode", "NonIndexed")
    if mode not in ("NonIndexed", "Indexed"):
        causes.append(
            ("spec.completionMode", f'Unsupported value: "{mode}": supported values: "Indexed", "NonIndexed"')
        )
    if mode == "Indexed" and spec.get("completions") is None:
        causes.append(("spec.completions", "Required value: when completion mode is Indexed"))
    template = spec.get("template") or {}
    causes += _labels((template.get("metadata") or {}).get("labels"), "spec.template.metadata.labels")
    pod_spec = template.get("spec") or {}
    restart = pod_spec.get("restartPolicy")
    if restart not in ("Never", "OnFailure"):
        causes.append(
            (
                "spec.template.spec.restartPolicy",
                'Required value: valid values: "OnFailure", "Never"'
                if restart is None
                else f'Unsupported value: "{restart}": supported values: "OnFailure", "Never"',
            )
        )
    causes += _pod_spec(pod_spec, "spec.template.spec")
    return causes


def _pod_spec(spec: dict[str, Any], field: str) -> Causes:
    causes: Causes = []
    containers = spec.get("containers") or []
    if not containers:
        causes.append((f"{field}.containers", "Required value"))
    for i, container in enumerate(containers):
        where = f"{field}.containers[{i}]"
        cname = container.get("name", "")
        if not cname or len(cname) > 63 or not DNS_LABEL.match(cname):
            causes.append(
                (f"{where}.name", f'Invalid value: "{cname}": a lowercase RFC 1123 label must consist of ...')
            )
        if not container.get("image"):
            causes.append((f"{where}.image", "Required value"))
        for key in ("command", "args"):
            value = container.get(key)
            if value is not None and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
                causes.append((f"{where}.{key}", "Invalid value: must be a list of strings"))
        for j, env in enumerate(container.get("env") or []):
            if not env.get("name"):
                causes.append((f"{where}.env[{j}].name", "Required value"))
        causes += _resources(container.get("resources") or {}, f"{where}.resources")
    subdomain = spec.get("subdomain")
    if subdomain is not None and not DNS_LABEL.match(subdomain):
        causes.append((f"{field}.subdomain", f'Invalid value: "{subdomain}": a lowercase RFC 1123 label ...'))
    return causes


def _resources(resources: dict[str, Any], field: str) -> Causes:
    causes: Causes = []
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    for part, values in (("requests", requests), ("limits", limits)):
        for resource, value in values.items():
            where = f"{field}.{part}[{resource}]"
            try:
                amount = quantity(value)
            except ValueError as exc:
                causes.append((where, f'Invalid value: "{value}": {exc}'))
                continue
            if amount < 0:
                causes.append((where, f'Invalid value: "{value}": must be greater than or equal to 0'))
            if _is_extended(resource) and amount != amount.to_integral_value():
                causes.append((where, f'Invalid value: "{value}": must be an integer'))
            if resource not in _NATIVE_RESOURCES and not _is_extended(resource):
                causes.append(
                    (where, f'Invalid value: "{resource}": must be a standard resource type or fully qualified')
                )
    for resource, value in requests.items():
        if not _is_extended(resource):
            continue
        if resource not in limits:
            causes.append((f"{field}.limits", "Required value: Limit must be set for non overcommitable resources"))
        elif quantity(limits[resource]) != quantity(value):
            causes.append(
                (
                    f"{field}.requests",
                    f'Invalid value: "{value}": must be equal to {resource} limit of {limits[resource]}',
                )
            )
    return causes


def _service(spec: dict[str, Any]) -> Causes:
    causes: Causes = []
    for i, port in enumerate(spec.get("ports") or []):
        number = port.get("port")
        if not isinstance(number, int) or not 0 < number < 65536:
            causes.append((f"spec.ports[{i}].port", f"Invalid value: {number!r}: must be between 1 and 65535"))
    if not spec.get("ports") and spec.get("clusterIP") != "None":
        causes.append(("spec.ports", "Required value"))
    return causes


def _default_container(container: dict[str, Any]) -> None:
    image = container.get("image", "")
    tag = image.rsplit("/", 1)[-1]
    latest = ":" not in tag or tag.endswith(":latest")
    container.setdefault("imagePullPolicy", "Always" if latest and "@" not in image else "IfNotPresent")
    container.setdefault("resources", {})
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")


def default_pod_spec(spec: dict[str, Any]) -> None:
    for container in spec.get("containers") or []:
        _default_container(container)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("terminationGracePeriodSeconds", 30)


def default(kind: Kind, obj: dict[str, Any]) -> None:
    """Fill in the defaults the API server adds, so responses look like a cluster's."""
    spec = obj.setdefault("spec", {}) if kind.kind not in ("Namespace",) else None
    if kind.kind == "Job" and spec is not None:
        uid = obj["metadata"]["uid"]
        name = obj["metadata"]["name"]
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("completions", 1)
        spec.setdefault("manualSelector", False)
        spec.setdefault("parallelism", 1)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        spec.setdefault("suspend", False)
        spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
        template = spec.setdefault("template", {})
        tmeta = template.setdefault("metadata", {})
        tmeta.setdefault("creationTimestamp", None)
        tmeta.setdefault("labels", {}).update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
        )
        obj["metadata"].setdefault("labels", {}).update(
            {
                "batch.kubernetes.io/controller-uid": uid,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "job-name": name,
            }
        )
        default_pod_spec(template.setdefault("spec", {}))
        obj.setdefault("status", {})
    elif kind.kind == "Pod" and spec is not None:
        default_pod_spec(spec)
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        spec.setdefault("priority", 0)
        spec.setdefault("serviceAccount", "default")
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault(
            "tolerations",
            [
                {"effect": "NoExecute", "key": f"node.kubernetes.io/{taint}", "operator": "Exists"}
                | {"tolerationSeconds": 300}
                for taint in ("not-ready", "unreachable")
            ],
        )
        obj.setdefault("status", {"phase": "Pending", "qosClass": "BestEffort"})
    elif kind.kind == "Service" and spec is not None:
        if spec.get("clusterIP") != "None":
            spec["clusterIP"] = f"10.96.{uuid.uuid4().int % 250}.{uuid.uuid4().int % 250 + 2}"
        spec["clusterIPs"] = [spec["clusterIP"]]
        spec.setdefault("internalTrafficPolicy", "Cluster")
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("sessionAffinity", "None")
        spec.setdefault("type", "ClusterIP")
        for port in spec.get("ports") or []:
            port.setdefault("protocol", "TCP")
            port.setdefault("targetPort", port.get("port"))
        obj.setdefault("status", {"loadBalancer": {}})
    elif kind.kind == "PodGroup" and spec is not None:
        obj.setdefault("status", {"phase": "Pending"})
    elif kind.kind == "Namespace":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj.setdefault("status", {"phase": "Active"})
