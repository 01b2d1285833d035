"""A user's own Kubernetes Job manifest: what it asks for, what the queue forbids in it, and the Job Gridlane
creates from it. Pure.

`read(text)` takes YAML or JSON holding one batch/v1 Job (a Kueue-labelled one with `suspend: true`
included) and gives its request: per pod, the larger of requests and limits summed over its containers
(init containers: the largest of them, as the scheduler counts), times `parallelism` pods, Indexed Jobs
with parallelism == completions counted as a gang. GPUs are `nvidia.com/gpu` or a MIG slice
(`nvidia.com/mig-1g.10gb`, counted as one GPU-slot each). `ManifestError` names the field.

`render(job, pod_template, namespace)` is the Job sent: the user's containers, env, volumes and the rest
of its pod spec intact; Gridlane's name (gl-<workload id>, the tag `find` looks for) and labels, the
fabric's namespace, what the queue's pod template forces (service account, node selector, tolerations,
the Kueue queue label) and, unless Kueue admits it, `suspend: false`, since Gridlane has admitted it.
"""

from __future__ import annotations

import copy
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from fabrics.base import Resources
from fabrics.kubernetes.policy import DEFAULT, Policy, PolicyError, check, check_job

GPU = "nvidia.com/gpu"
MIG = re.compile(r"^nvidia\.com/mig-[0-9a-z.]+$")
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([a-zA-Z]*)$")
BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "m": 10**-3}


class ManifestError(ValueError):
    """A manifest Gridlane cannot run; `field` is where (spec.template.spec.volumes[0].hostPath)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.field = field


@dataclass(frozen=True)
class Manifest:
    job: dict[str, Any]
    per_pod: Resources
    pods: int  # parallelism: pods at once, each counted as one node
    gang: bool  # Indexed with parallelism == completions: all start together
    gpu_resource: str  # nvidia.com/gpu, a MIG name, or ""
    deadline_s: int | None  # activeDeadlineSeconds, if the manifest sets it
    name: str


def load(text: str) -> dict[str, Any]:
    text = text.lstrip("\ufeff")
    try:
        doc = json.loads(text) if text.lstrip().startswith("{") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise ManifestError("", f"not valid YAML or JSON: {str(error).splitlines()[0]}") from error
    if not isinstance(doc, dict):
        raise ManifestError("", "give one Kubernetes object (a batch/v1 Job)")
    if doc.get("apiVersion") != "batch/v1" or doc.get("kind") != "Job":
        raise ManifestError("kind", f"a batch/v1 Job, not {doc.get('apiVersion')}/{doc.get('kind')}")
    return doc


def quantity(field: str, value: Any) -> float:
    """A Kubernetes quantity as a plain number (cores, bytes, units)."""
    m = QUANTITY.match(str(value))
    if not m or (m.group(2) and m.group(2) not in BINARY and m.group(2) not in DECIMAL):
        raise ManifestError(field, f"{value!r} is not a quantity such as 500m, 4, 16Gi")
    return float(m.group(1)) * (BINARY.get(m.group(2)) or DECIMAL[m.group(2)])


def _container_needs(path: str, container: Any) -> tuple[float, float, float, str]:
    """CPUs, bytes and GPUs one container asks for (the larger of requests and limits), and its GPU resource."""
    if not isinstance(container, dict):
        raise ManifestError(path, "a container is a mapping")
    resources = container.get("resources") or {}
    cpu = memory = gpus = 0.0
    gpu_name = ""
    for kind in ("requests", "limits"):
        for key, value in (resources.get(kind) or {}).items():
            where = f"{path}.resources.{kind}.{key}"
            if key == "cpu":
                cpu = max(cpu, quantity(where, value))
            elif key == "memory":
                memory = max(memory, quantity(where, value))
            elif key == GPU or MIG.match(key):
                if gpu_name and key != gpu_name:
                    raise ManifestError(where, f"one kind of GPU per container ({gpu_name} already)")
                gpus, gpu_name = max(gpus, quantity(where, value)), key
    return cpu, memory, gpus, gpu_name


def _quantities_as_text(container: dict[str, Any]) -> None:
    """`nvidia.com/gpu: 2` as the API's JSON has it, "2" (YAML users write numbers; the value is the same)."""
    resources = container.get("resources") or {}
    for kind in ("requests", "limits"):
        values = resources.get(kind)
        if isinstance(values, dict):
            resources[kind] = {k: v if isinstance(v, str) else str(v) for k, v in values.items()}


def target_policy(template: str, settings: Mapping[str, Any]) -> Policy:
    """The policy of a queue target: its pod template's exceptions and the fabric's reserved taints (ValueError when
    either does not read, as the admin forms check them)."""
    from fabrics.kubernetes.render import load_template  # render imports this module
    from fabrics.kubernetes.settings import KubeSettings

    return Policy.of(load_template(template), KubeSettings.parse(settings).reserved_taints)


def read(text: str, namespace: str = "", policy: Policy = DEFAULT) -> Manifest:
    """The Job and its request; ManifestError naming the field for what it cannot be or what the policy (policy.py:
    by default, no exception) does not allow."""
    job = load(text)
    meta = job.get("metadata") or {}
    if not isinstance(meta, dict):
        raise ManifestError("metadata", "a mapping")
    given_ns = meta.get("namespace")
    if given_ns and namespace and given_ns != namespace:
        raise ManifestError("metadata.namespace", f"{given_ns!r}: jobs of this queue run in {namespace!r}")
    spec = job.get("spec")
    if not isinstance(spec, dict):
        raise ManifestError("spec", "a Job needs a spec with a pod template")
    template = spec.get("template")
    pod = template.get("spec") if isinstance(template, dict) else None
    if not isinstance(pod, dict):
        raise ManifestError("spec.template.spec", "a Job needs a pod template with containers")
    base = "spec.template.spec"
    try:
        check_job(spec)
        check(pod, policy, base)
    except PolicyError as error:
        raise ManifestError(error.field, str(error).partition(": ")[2]) from error
    containers = pod.get("containers")
    if not isinstance(containers, list) or not containers:
        raise ManifestError(f"{base}.containers", "at least one container")
    cpu = memory = gpus = 0.0
    gpu_name = ""
    for i, container in enumerate(containers):
        c, m, g, name = _container_needs(f"{base}.containers[{i}]", container)
        cpu, memory, gpus = cpu + c, memory + m, gpus + g
        gpu_name = gpu_name or name
    for i, container in enumerate(pod.get("initContainers") or []):
        c, m, g, name = _container_needs(f"{base}.initContainers[{i}]", container)
        cpu, memory, gpus = max(cpu, c), max(memory, m), max(gpus, g)
        gpu_name = gpu_name or name
    counts = {}
    for key in ("parallelism", "completions"):
        value = spec.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ManifestError(f"spec.{key}", "a whole number of at least 1")
        counts[key] = value
    pods = counts["parallelism"]
    gang = spec.get("completionMode") == "Indexed" and counts["completions"] == pods and pods > 1
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, int) or deadline < 1):
        raise ManifestError("spec.activeDeadlineSeconds", "a whole number of seconds")
    if gpus != int(gpus):
        raise ManifestError(f"{base}.containers", "GPUs are whole units")
    per_pod = Resources(int(gpus) * 1000, max(1, math.ceil(cpu * 1000)), max(1, math.ceil(memory / 2**20)))
    name = meta.get("name") or meta.get("generateName") or "job"
    return Manifest(job, per_pod, pods, gang, gpu_name, deadline, str(name))


def render(
    manifest: Manifest, *, name: str, namespace: str, labels: dict[str, str], pod_template: dict[str, Any],
    runtime_s: int, env: dict[str, str], priority_class: str = "",
) -> dict[str, Any]:  # fmt: skip
    """The Job as created: the user's, renamed and tagged, with its priority tier's PriorityClass (`priority_class`,
    and in Kueue mode its WorkloadPriorityClass) and what the queue's pod template forces, which wins."""
    job = copy.deepcopy(manifest.job)
    meta = job.setdefault("metadata", {})
    user_name = meta.pop("name", None) or meta.pop("generateName", None)
    meta["name"] = name
    if namespace:
        meta["namespace"] = namespace
    annotations = meta.setdefault("annotations", {})
    if user_name:
        annotations["gridlane.io/manifest-name"] = str(user_name)
    forced_labels = {k: v for k, v in ((pod_template.get("metadata") or {}).get("labels") or {}).items()}
    kueue = forced_labels.get(KUEUE_QUEUE_LABEL)
    job_labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != KUEUE_QUEUE_LABEL}
    meta["labels"] = job_labels | labels | ({KUEUE_QUEUE_LABEL: kueue} if kueue else {})
    if kueue and priority_class and KUEUE_PRIORITY_LABEL not in forced_labels:
        meta["labels"][KUEUE_PRIORITY_LABEL] = priority_class
    spec = job["spec"]
    spec["suspend"] = bool(kueue)  # Kueue admits it in the cluster; otherwise Gridlane already has
    spec.setdefault("activeDeadlineSeconds", runtime_s)
    spec["activeDeadlineSeconds"] = min(int(spec["activeDeadlineSeconds"]), runtime_s)
    template = spec["template"]
    pod_meta = template.setdefault("metadata", {})
    pod_meta["labels"] = dict(pod_meta.get("labels") or {}) | labels
    pod = template["spec"]
    forced_pod = pod_template.get("spec") or {}
    if priority_class:
        pod["priorityClassName"] = priority_class
    for key in ("serviceAccountName", "nodeSelector", "priorityClassName", "runtimeClassName"):
        if key in forced_pod:
            pod[key] = copy.deepcopy(forced_pod[key])
    if forced_pod.get("tolerations"):
        pod["tolerations"] = [*(pod.get("tolerations") or []), *copy.deepcopy(forced_pod["tolerations"])]
    for container in [*pod["containers"], *(pod.get("initContainers") or [])]:
        _quantities_as_text(container)
    for container in pod["containers"]:
        given = [e for e in (container.get("env") or []) if not (isinstance(e, dict) and e.get("name") in env)]
        container["env"] = [*given, *({"name": k, "value": v} for k, v in env.items())]
    return job
