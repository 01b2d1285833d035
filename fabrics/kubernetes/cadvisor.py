"""CPU utilisation of Gridlane's pods from the site's Prometheus, which scrapes the kubelets' cAdvisor.

Read in the same instant query as the GPUs (fabrics.kubernetes.dcgm): the rate of cAdvisor's
`container_cpu_usage_seconds_total` between its last two scrapes in the window (`irate`: cores in use now, a
reading of the moment like DCGM's gauges; the idle windows average the readings), summed by namespace, pod and
container, under either spelling of the labels (`exported_*` where Prometheus's own target labels already use
the names), each marked with the label `gridlane_series="cpu"`, which is how they are told from the DCGM series
of the same answer. cAdvisor's pod-level series (no container) and the pause container (`POD`) are left out, so
each container counts once.

A job's CPU utilisation is the cores its reporting pods' containers use against the CPUs those pods request
(their containers' requests, else limits, as Kubernetes defaults them), 0-100. A job none of whose pods report,
or whose pods request no CPU, has no data (None), never 0.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from fabrics.kubernetes.dcgm import OTHER, Namespaces, matcher, readings
from fabrics.kubernetes.parse import quantity

METRIC = "container_cpu_usage_seconds_total"
WINDOW = "2m"  # room for two scrapes at the usual 30 s interval, and a missed one
MARK = "cpu"  # the value of dcgm.OTHER on these series
SKIPPED_CONTAINERS = frozenset({"", "POD"})


def query_for(namespaces: Namespaces) -> str:
    """The PromQL: cores in use by each container in the namespaces, under either spelling of its labels."""
    by = "namespace, pod, container, exported_namespace, exported_pod, exported_container"
    plain = f"sum by ({by}) (irate({METRIC}{{{matcher('namespace', namespaces)}}}[{WINDOW}]))"
    exported = f"sum by ({by}) (irate({METRIC}{{{matcher('exported_namespace', namespaces)}}}[{WINDOW}]))"
    return f'label_replace({plain} or {exported}, "{OTHER}", "{MARK}", "", "")'


def by_pod(result: Sequence[Mapping[str, Any]], namespaces: Namespaces) -> dict[str, float]:
    """Cores in use by each pod of the namespaces (its containers summed); series without the mark (DCGM's) and
    series that cannot be read are left out."""
    cores: defaultdict[str, float] = defaultdict(float)
    for metric, pod, used in readings(result, namespaces):
        container = metric.get("exported_container", metric.get("container", ""))
        if metric.get(OTHER) != MARK or container in SKIPPED_CONTAINERS or used < 0:
            continue
        cores[pod] += used
    return dict(cores)


def requested_cores(pod: Mapping[str, Any]) -> float:
    """The CPUs a pod requests: its containers' requests, each else its limit (0 where neither says)."""
    total = Decimal(0)
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        amount = (resources.get("requests") or {}).get("cpu") or (resources.get("limits") or {}).get("cpu") or 0
        try:
            total += quantity(amount)
        except (InvalidOperation, ValueError, TypeError):
            continue
    return float(total)


def of_job(cores: Mapping[str, float], pods: Sequence[Mapping[str, Any]]) -> float | None:
    """A job's CPU utilisation (0-100): the cores its reporting pods use against the CPUs they request."""
    used, requested = 0.0, 0.0
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name", "")
        if name in cores:
            used += cores[name]
            requested += requested_cores(pod)
    if requested <= 0:
        return None
    return min(100.0, 100.0 * used / requested)
