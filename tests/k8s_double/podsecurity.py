"""Pod Security admission, as kube-apiserver v1.31 enforces it on pods in a namespace labelled
`pod-security.kubernetes.io/enforce: baseline|restricted` (the "latest" policies of the Pod Security Standards).

Checked: baseline: host namespaces, privileged, capabilities beyond the baseline set, hostPath volumes, host
ports, an Unconfined seccomp profile, procMount, sysctls; restricted, beyond those: volume types, privilege
escalation, running as non-root, uid 0, a seccomp profile of RuntimeDefault or Localhost, capabilities dropped
(ALL) and none added but NET_BIND_SERVICE. A pod that violates them is refused with 403 Forbidden, worded as the
API server words it; the double's Job controller then creates no pod (a FailedCreate).
"""

from __future__ import annotations

from typing import Any

from tests.k8s_double.objects import ApiError, status

ENFORCE = "pod-security.kubernetes.io/enforce"
BASELINE_CAPS = {"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
                 "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"}  # fmt: skip
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}  # fmt: skip


def violations(level: str, pod: dict[str, Any]) -> list[str]:
    """What the pod does that the level forbids, as the API server lists it; [] for privileged or no level."""
    if level not in ("baseline", "restricted"):
        return []
    spec = pod.get("spec") or {}
    found = [f"{k}=true" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    context = spec.get("securityContext") or {}
    for c in containers:
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            found.append(f'privileged (container "{c["name"]}" must not set securityContext.privileged=true)')
        added = set((sc.get("capabilities") or {}).get("add") or [])
        allowed = {"NET_BIND_SERVICE"} if level == "restricted" else BASELINE_CAPS
        if added - allowed:
            found.append(f'unrestricted capabilities (container "{c["name"]}" must not include '
                         f'{", ".join(sorted(added - allowed))} in securityContext.capabilities.add)')  # fmt: skip
        if any(p.get("hostPort") for p in c.get("ports") or []):
            found.append(f'hostPort (container "{c["name"]}" uses hostPort)')
    volumes = spec.get("volumes") or []
    if any("hostPath" in v for v in volumes):
        found.append("hostPath volumes")
    profiles = [context.get("seccompProfile")] + [
        (c.get("securityContext") or {}).get("seccompProfile") for c in containers
    ]
    if any((p or {}).get("type") == "Unconfined" for p in profiles):
        found.append("seccompProfile (type Unconfined)")
    if level == "restricted":
        found += _restricted(spec, containers, context, volumes)
    return found


def _restricted(spec: dict[str, Any], containers: list[dict[str, Any]], context: dict[str, Any],
                volumes: list[dict[str, Any]]) -> list[str]:  # fmt: skip
    found = []
    bad = [v["name"] for v in volumes if not set(v) - {"name"} <= RESTRICTED_VOLUMES]
    if bad:
        found.append(f"restricted volume types (volumes {', '.join(bad)} use a restricted volume type)")
    for c in containers:
        sc, name = c.get("securityContext") or {}, c["name"]
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f'allowPrivilegeEscalation != false (container "{name}" must set '
                         "securityContext.allowPrivilegeEscalation=false)")  # fmt: skip
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            found.append(
                f'unrestricted capabilities (container "{name}" must set securityContext.capabilities.drop=["ALL"])'
            )
        if not sc.get("runAsNonRoot", context.get("runAsNonRoot")):
            found.append(f'runAsNonRoot != true (container "{name}" must set securityContext.runAsNonRoot=true)')
        if sc.get("runAsUser", context.get("runAsUser")) == 0:
            found.append(f'runAsUser=0 (container "{name}" must not set runAsUser=0)')
        profile = (sc.get("seccompProfile") or context.get("seccompProfile") or {}).get("type")
        if profile not in ("RuntimeDefault", "Localhost"):
            found.append(f'seccompProfile (container "{name}" must set securityContext.seccompProfile.type to '
                         '"RuntimeDefault" or "Localhost")')  # fmt: skip
    return found


def enforce(level: str, pod: dict[str, Any]) -> None:
    """Raise the API server's 403 when the pod violates the namespace's level."""
    found = violations(level, pod)
    if found:
        name = (pod.get("metadata") or {}).get("name", "")
        message = f'pods "{name}" is forbidden: violates PodSecurity "{level}:latest": {", ".join(found)}'
        raise ApiError(status(403, "Forbidden", message, {"name": name, "kind": "pods"}))
