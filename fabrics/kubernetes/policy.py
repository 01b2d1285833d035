"""What a user's own Job manifest may say about its pods: an allowlist, with IT's exceptions per queue target. Pure.

Every field of the pod spec, a container, a volume and a security context is either in the allowlist below (and
then checked where it reaches something: a reference, a privilege) or refused, naming its path
(`spec.template.spec.containers[0].securityContext.privileged`). Refused by default, each allowed only where the
queue target's pod template names it in its `gridlane.io/allow` annotation (comma-separated, from ALLOWABLE):

    serviceAccountName  automountServiceAccountToken  serviceAccountToken (a projected token)  nodeName
    schedulerName  hostPort  hostNetwork  hostPID  hostIPC  privileged  capabilities (any added)  runAsRoot (uid 0)
    priorityClassName  reservedTolerations (tolerating a taint IT reserves)  hostPath  supplementalGroups

Secrets, ConfigMaps and PersistentVolumeClaims may be referenced (volumes, projected sources, env, envFrom,
imagePullSecrets) by name only: `references()` lists them, and the fabric checks at dispatch that each is in the
Job's namespace and labelled `gridlane.io/team: <its team>` (fabric.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ALLOW_ANNOTATION = "gridlane.io/allow"
TEAM_LABEL = "gridlane.io/team"
ALLOWABLE = frozenset(
    {
        "serviceAccountName", "automountServiceAccountToken", "serviceAccountToken", "nodeName", "schedulerName",
        "hostPort", "hostNetwork", "hostPID", "hostIPC", "privileged", "capabilities", "runAsRoot",
        "priorityClassName", "reservedTolerations", "hostPath", "supplementalGroups",
    }
)  # fmt: skip
JOB = frozenset(
    {
        "template",
        "parallelism",
        "completions",
        "completionMode",
        "backoffLimit",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
        "suspend",
        "podFailurePolicy",
        "successPolicy",
        "podReplacementPolicy",
    }
)  # fmt: skip (no selector or manualSelector: a Job's pods are its own)
POD = frozenset(
    {
        "containers", "initContainers", "volumes", "restartPolicy", "nodeSelector", "affinity", "tolerations",
        "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "dnsConfig", "securityContext",
        "imagePullSecrets", "enableServiceLinks", "topologySpreadConstraints", "runtimeClassName", "hostname",
        "subdomain", "setHostnameAsFQDN", "shareProcessNamespace",
    }
)  # fmt: skip
CONTAINER = frozenset(
    {
        "name", "image", "command", "args", "workingDir", "env", "envFrom", "resources", "volumeMounts", "ports",
        "imagePullPolicy", "securityContext", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
        "terminationMessagePath", "terminationMessagePolicy", "stdin", "stdinOnce", "tty", "restartPolicy",
    }
)  # fmt: skip
SECURITY = frozenset(
    {"runAsNonRoot", "runAsUser", "runAsGroup", "allowPrivilegeEscalation", "readOnlyRootFilesystem", "seccompProfile"}
)
POD_SECURITY = frozenset(
    {"runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "fsGroupChangePolicy", "seccompProfile"}
)
VOLUMES = frozenset({"emptyDir", "secret", "configMap", "persistentVolumeClaim", "projected", "downwardAPI"})
PROJECTED = frozenset({"secret", "configMap", "downwardAPI", "clusterTrustBundle"})
# The one privilege-bearing field each of these pod fields is, by the name it is allowed under.
BY_NAME = {"serviceAccount": "serviceAccountName"}


class PolicyError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class Policy:
    """IT's exceptions for one queue target, and the taints it reserves on the fabric."""

    allowed: frozenset[str] = frozenset()
    reserved_taints: tuple[str, ...] = ()

    @classmethod
    def of(cls, template: Mapping[str, Any], reserved_taints: Iterable[str] = ()) -> Policy:
        """From a loaded pod template (render.load_template) and the fabric's reserved taints."""
        annotations = (template.get("metadata") or {}).get("annotations") or {}
        named = {a.strip() for a in str(annotations.get(ALLOW_ANNOTATION, "")).split(",") if a.strip()}
        return cls(frozenset(named & ALLOWABLE), tuple(reserved_taints))


DEFAULT = Policy()


@dataclass(frozen=True)
class Reference:
    field: str  # where the manifest names it
    kind: str  # "secrets", "configmaps", "persistentvolumeclaims"
    name: str


def check(pod: Mapping[str, Any], policy: Policy, base: str = "spec.template.spec") -> None:
    """Raise PolicyError naming the first field the policy does not allow."""
    _Check(policy).pod(pod, base)


def check_job(spec: Mapping[str, Any]) -> None:
    """Raise PolicyError for a Job spec field outside the allowlist (a selector would adopt other pods)."""
    for key in spec:
        if key not in JOB:
            raise PolicyError(
                f"spec.{key}", "not allowed on this queue (a Job field Gridlane does not know to be safe)"
            )


def references(pod: Mapping[str, Any], base: str = "spec.template.spec") -> list[Reference]:
    """Every Secret, ConfigMap and PersistentVolumeClaim the pod names, with where it names it."""
    found: list[Reference] = []
    for i, volume in enumerate(pod.get("volumes") or []):
        at = f"{base}.volumes[{i}]"
        for key, kind, name_key in (("secret", "secrets", "secretName"), ("configMap", "configmaps", "name"),
                                    ("persistentVolumeClaim", "persistentvolumeclaims", "claimName")):  # fmt: skip
            if isinstance(volume.get(key), Mapping):
                found.append(Reference(f"{at}.{key}.{name_key}", kind, str(volume[key].get(name_key, ""))))
        for j, source in enumerate((volume.get("projected") or {}).get("sources") or []):
            for key, kind in (("secret", "secrets"), ("configMap", "configmaps")):
                if isinstance(source.get(key), Mapping):
                    where = f"{at}.projected.sources[{j}].{key}.name"
                    found.append(Reference(where, kind, str(source[key].get("name", ""))))
    for i, secret in enumerate(pod.get("imagePullSecrets") or []):
        found.append(Reference(f"{base}.imagePullSecrets[{i}].name", "secrets", str(secret.get("name", ""))))
    for group in ("initContainers", "containers"):
        for i, container in enumerate(pod.get(group) or []):
            at = f"{base}.{group}[{i}]"
            for j, env in enumerate(container.get("env") or []):
                source = env.get("valueFrom") or {}
                for key, kind in (("secretKeyRef", "secrets"), ("configMapKeyRef", "configmaps")):
                    if isinstance(source.get(key), Mapping):
                        where = f"{at}.env[{j}].valueFrom.{key}.name"
                        found.append(Reference(where, kind, str(source[key].get("name", ""))))
            for j, env in enumerate(container.get("envFrom") or []):
                for key, kind in (("secretRef", "secrets"), ("configMapRef", "configmaps")):
                    if isinstance(env.get(key), Mapping):
                        found.append(Reference(f"{at}.envFrom[{j}].{key}.name", kind, str(env[key].get("name", ""))))
    return found


class _Check:
    def __init__(self, policy: Policy) -> None:
        self.allowed = policy.allowed
        self.reserved = set(policy.reserved_taints)

    def refuse(self, field: str, what: str) -> None:
        raise PolicyError(field, f"not allowed on this queue ({what}; IT may allow it on the queue's target)")

    def unless(self, name: str, field: str, what: str) -> None:
        if name not in self.allowed:
            self.refuse(field, what)

    def pod(self, pod: Mapping[str, Any], base: str) -> None:
        for key, value in pod.items():
            name = BY_NAME.get(key, key)
            if name in ALLOWABLE:
                if value not in (None, False, "", []):
                    self.unless(name, f"{base}.{key}", "Gridlane sets it" if "serviceAccount" in name else name)
            elif key not in POD:
                self.refuse(f"{base}.{key}", "a pod field Gridlane does not know to be safe")
        for i, toleration in enumerate(pod.get("tolerations") or []):
            key = str((toleration or {}).get("key", ""))
            if not key or key in self.reserved:  # an empty key tolerates every taint, reserved ones included
                self.unless("reservedTolerations", f"{base}.tolerations[{i}]", "it tolerates a taint IT reserves")
        self.security(pod.get("securityContext") or {}, f"{base}.securityContext", POD_SECURITY)
        for i, volume in enumerate(pod.get("volumes") or []):
            self.volume(volume, f"{base}.volumes[{i}]")
        for group in ("initContainers", "containers"):
            for i, container in enumerate(pod.get(group) or []):
                self.container(container, f"{base}.{group}[{i}]")

    def container(self, container: Mapping[str, Any], at: str) -> None:
        for key in container:
            if key not in CONTAINER:
                self.refuse(f"{at}.{key}", "a container field Gridlane does not know to be safe")
        for j, port in enumerate(container.get("ports") or []):
            if isinstance(port, Mapping) and port.get("hostPort"):
                self.unless("hostPort", f"{at}.ports[{j}].hostPort", "a port on the node")
        context = container.get("securityContext") or {}
        self.security(context, f"{at}.securityContext", SECURITY | {"privileged", "capabilities"})
        if context.get("privileged"):
            self.unless("privileged", f"{at}.securityContext.privileged", "a privileged container")
        capabilities = context.get("capabilities") or {}
        for key in capabilities:
            if key != "drop" and (key != "add" or capabilities[key]):
                self.unless("capabilities", f"{at}.securityContext.capabilities.{key}", "added capabilities")

    def security(self, context: Mapping[str, Any], at: str, allowed: frozenset[str]) -> None:
        for key in context:
            if key == "supplementalGroups":
                self.unless("supplementalGroups", f"{at}.{key}", "groups beyond the person's own")
            elif key not in allowed:
                self.refuse(f"{at}.{key}", "a security setting Gridlane does not know to be safe")
        if context.get("runAsNonRoot") is False or context.get("runAsUser") == 0 or context.get("runAsGroup") == 0:
            field = next(k for k in ("runAsNonRoot", "runAsUser", "runAsGroup") if k in context and not context[k])
            self.unless("runAsRoot", f"{at}.{field}", "running as root")
        profile = (context.get("seccompProfile") or {}).get("type")
        if profile not in (None, "RuntimeDefault", "Localhost"):
            self.refuse(f"{at}.seccompProfile.type", f"{profile}: RuntimeDefault or Localhost only")

    def volume(self, volume: Mapping[str, Any], at: str) -> None:
        for key in volume:
            if key == "name" or key in VOLUMES:
                continue
            if key == "hostPath":
                self.unless("hostPath", f"{at}.hostPath", "a folder of the node")
            else:
                self.refuse(f"{at}.{key}", "a volume type Gridlane does not know to be safe")
        for j, source in enumerate((volume.get("projected") or {}).get("sources") or []):
            for key in source:
                if key == "serviceAccountToken":
                    where = f"{at}.projected.sources[{j}].serviceAccountToken"
                    self.unless("serviceAccountToken", where, "a service account token")
                elif key not in PROJECTED:
                    self.refuse(f"{at}.projected.sources[{j}].{key}", "a projection Gridlane does not know to be safe")
