"""What the double's API server knows about objects: kinds, names, quantities, timestamps, Status bodies.

Shapes follow the Kubernetes API reference (meta/v1 Status, ObjectMeta, the core/v1, apps/v1, batch/v1 and
networking.k8s.io/v1 types).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any


@dataclass(frozen=True)
class Kind:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    builtin: bool = True  # built-in lists leave kind/apiVersion off their items; custom resources keep them
    # A status subresource: writes to the object leave its status alone, writes to /status touch nothing else.
    status_subresource: bool = False

    @property
    def model(self) -> str:
        """The official client's model of a built-in kind ("V1Job"); "" for custom resources."""
        return f"V1{self.kind}" if self.builtin and self.version == "v1" else ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> str:
        """`jobs.batch`, `pods`: how the API server names the resource in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """`Job.batch`, `Pod`: how validation messages name the kind."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


KINDS = (
    Kind("", "v1", "namespaces", "Namespace", namespaced=False),
    Kind("", "v1", "nodes", "Node", namespaced=False),
    Kind("", "v1", "pods", "Pod"),
    Kind("", "v1", "services", "Service"),
    Kind("", "v1", "secrets", "Secret"),
    Kind("", "v1", "configmaps", "ConfigMap"),
    Kind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim"),
    Kind("", "v1", "serviceaccounts", "ServiceAccount"),
    Kind("", "v1", "resourcequotas", "ResourceQuota"),
    Kind("apps", "v1", "deployments", "Deployment"),
    Kind("batch", "v1", "jobs", "Job"),
    Kind("networking.k8s.io", "v1", "ingresses", "Ingress"),
    Kind("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    Kind("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", builtin=False),
    # Kueue's kinds at their stored version; which versions are served comes from its CRDs (crds.py).
    *(
        Kind("kueue.x-k8s.io", "v1beta2", plural, kind, namespaced=namespaced, builtin=False, status_subresource=sub)
        for plural, kind, namespaced, sub in (
            ("workloads", "Workload", True, True),
            ("clusterqueues", "ClusterQueue", False, True),
            ("localqueues", "LocalQueue", True, True),
            ("resourceflavors", "ResourceFlavor", False, False),  # no status at all
            ("cohorts", "Cohort", False, True),
            ("topologies", "Topology", False, False),
            ("workloadpriorityclasses", "WorkloadPriorityClass", False, False),
        )
    ),
)
BY_PATH = {(k.group, k.version, k.plural): k for k in KINDS}
BY_NAME = {k.plural if not k.group else f"{k.plural}.{k.group}": k for k in KINDS}
BY_NAME |= {k.plural: k for k in KINDS}  # "jobs" as well as "jobs.batch"

# DNS-1123 label (most names), DNS-1035 label (Service names), qualified names and label values.
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")  # keys of a ConfigMap's or a Secret's data
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def now_rfc3339(at: float | None = None) -> str:
    """`2024-05-02T10:00:00Z`: the API server's timestamps have whole seconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if at is None else at))


def label_key_error(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return "prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"
    if not name or len(name) > 63 or not QUALIFIED_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            "alphanumeric character"
        )
    return None


def label_value_error(value: Any) -> str | None:
    if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
        return (
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character"
        )
    return None


_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)(m|k|M|G|T|Ki|Mi|Gi|Ti)?$")


def quantity(value: Any) -> Decimal:
    """A resource.Quantity ("500m", "64Gi", 2) as a number; ValueError when it is not one."""
    m = _QUANTITY.match(str(value).strip())
    if not m:
        raise ValueError(f"quantities must match the regular expression '{_QUANTITY.pattern}'")
    try:
        return Decimal(m[1]) * _SUFFIX[m[2] or ""]
    except InvalidOperation as exc:
        raise ValueError(str(exc)) from exc


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """A meta/v1 Status with status Failure, as the API server sends for every error."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def object_details(kind: Kind, name: str, *, by_kind: bool = False) -> dict[str, Any]:
    details: dict[str, Any] = {"name": name}
    if kind.group:
        details["group"] = kind.group
    details["kind"] = kind.kind if by_kind else kind.plural
    return details


class ApiError(Exception):
    """Answer the request with this Status."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(body["message"])
        self.body = body
        self.code = int(body["code"])


def not_found(kind: Kind, name: str) -> ApiError:
    return ApiError(status(404, "NotFound", f'{kind.resource} "{name}" not found', object_details(kind, name)))


def already_exists(kind: Kind, name: str) -> ApiError:
    return ApiError(
        status(409, "AlreadyExists", f'{kind.resource} "{name}" already exists', object_details(kind, name))
    )


def conflict(kind: Kind, name: str) -> ApiError:
    message = (
        f'Operation cannot be fulfilled on {kind.resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    return ApiError(status(409, "Conflict", message, object_details(kind, name)))


def invalid(kind: Kind, name: str, causes: list[tuple[str, str]]) -> ApiError:
    """422 Invalid with one cause per (field, message)."""
    text = ", ".join(f"{field}: {message}" for field, message in causes)
    details = object_details(kind, name, by_kind=True)
    details["causes"] = [
        {"reason": "FieldValueInvalid", "message": message, "field": field} for field, message in causes
    ]
    return ApiError(status(422, "Invalid", f'{kind.qualified_kind} "{name}" is invalid: {text}', details))


def bad_request(message: str) -> ApiError:
    return ApiError(status(400, "BadRequest", message))
