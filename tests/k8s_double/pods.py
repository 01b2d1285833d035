"""Small pieces of object state the double's controllers share: conditions, requests, nodes."""

from __future__ import annotations

import uuid
from collections import defaultdict
from decimal import Decimal
from typing import Any

from tests.k8s_double.objects import now_rfc3339, quantity


def _condition(ctype: str, status: str, reason: str = "", message: str = "", probe: bool = True) -> dict[str, Any]:
    now = now_rfc3339()
    cond: dict[str, Any] = {"type": ctype, "status": status}
    if probe:
        cond["lastProbeTime"] = now
    cond["lastTransitionTime"] = now
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def _set_condition(conditions: list[dict[str, Any]], new: dict[str, Any]) -> None:
    for i, cond in enumerate(conditions):
        if cond["type"] == new["type"]:
            if (cond["status"], cond.get("reason"), cond.get("message")) != (
                new["status"],
                new.get("reason"),
                new.get("message"),
            ):
                conditions[i] = new
            return
    conditions.append(new)


def _true(obj: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond["type"] == ctype and cond["status"] == "True":
            return cond
    return None


def job_finished(job: dict[str, Any]) -> bool:
    return bool(_true(job, "Complete") or _true(job, "Failed"))


def _requests(pod: dict[str, Any]) -> dict[str, Decimal]:
    total: dict[str, Decimal] = defaultdict(Decimal)
    for container in pod["spec"].get("containers") or []:
        resources = container.get("resources") or {}
        asked = dict(resources.get("limits") or {}) | dict(resources.get("requests") or {})
        for resource, value in asked.items():
            total[resource] += quantity(value)
    return total


def _live(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") in ("Pending", "Running")


def node(
    name: str,
    *,
    cpu: str = "32",
    memory: str = "256Gi",
    gpus: int = 8,
    gpu_resource: str = "nvidia.com/gpu",
    ready: bool = True,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as the kubelet registers it (the API reference's shape, trimmed of images)."""
    resources = {"cpu": cpu, "ephemeral-storage": "1047706236Ki", "memory": memory, "pods": "110"}
    if gpus:
        resources[gpu_resource] = str(gpus)
    conditions = [
        _condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        _condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        _condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        _condition(
            "Ready",
            "True" if ready else "False",
            "KubeletReady" if ready else "KubeletNotReady",
            "kubelet is posting ready status" if ready else "container runtime network not ready",
        ),
    ]
    for cond in conditions:
        cond["lastHeartbeatTime"] = cond.pop("lastProbeTime")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
            }
            | (labels or {}),
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": f"10.0.0.{abs(hash(name)) % 200 + 10}"},
                {"type": "Hostname", "address": name},
            ],
            "allocatable": dict(resources),
            "capacity": dict(resources),
            "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": str(uuid.uuid4()),
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.8.0-45-generic",
                "kubeProxyVersion": "v1.31.2",
                "kubeletVersion": "v1.31.2",
                "machineID": uuid.uuid4().hex,
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04.1 LTS",
                "systemUUID": str(uuid.uuid4()),
            },
        },
    }


def _qos(pod: dict[str, Any]) -> str:
    containers = pod["spec"].get("containers") or []
    resources = [c.get("resources") or {} for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    guaranteed = all(
        all(
            (r.get("limits") or {}).get(k) is not None
            and quantity((r.get("limits") or {})[k]) == quantity((r.get("requests") or r.get("limits") or {}).get(k, 0))
            for k in ("cpu", "memory")
        )
        for r in resources
    )
    return "Guaranteed" if guaranteed else "Burstable"
