"""GPU utilisation of Gridlane's pods from the site's Prometheus, which scrapes NVIDIA's DCGM exporter.

One instant query per sync for the namespaces Gridlane's running pods are in (the fabric's one namespace, or
each team's: fabrics.kubernetes.tenancy), never one per pod, for two series per device, labelled with
the pod and namespace the device is allocated to (the exporter's Kubernetes mapping): the profiling metric
`DCGM_FI_PROF_GR_ENGINE_ACTIVE` (the share of time the graphics engine was busy, 0-1), which MIG instances report
too, and the coarse `DCGM_FI_DEV_GPU_UTIL` (percent), which they do not. Each device (its node, GPU index and
MIG instance) counts once: by its profiling series where the exporter has profiling on, else by the coarse one.
Prometheus renames those labels `exported_pod` and `exported_namespace` when its own target labels already use
the names (a scrape through Kubernetes service discovery, without honor_labels): both spellings are read.
A pod with no series has no data (None), never 0 or 100.
"""

from __future__ import annotations

import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Collection, Iterator, Mapping, Sequence
from typing import Any

METRIC = "DCGM_FI_DEV_GPU_UTIL"  # percent; whole GPUs only
PROFILING = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # a ratio 0-1; whole GPUs and MIG instances
OTHER = "gridlane_series"  # the label that marks another reading joined to the same query (not a device)
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
DNS_LABEL = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")  # a namespace's name: a literal in a PromQL regex

Namespaces = str | Collection[str]


def names_of(namespaces: Namespaces) -> list[str]:
    """The namespaces asked about, sorted: one name or several; a name that is no DNS label is left out."""
    names = {namespaces} if isinstance(namespaces, str) else set(namespaces)
    return sorted(n for n in names if DNS_LABEL.fullmatch(n))


def matcher(label: str, namespaces: Namespaces) -> str:
    """A PromQL label matcher for these namespaces: `label="a"`, or `label=~"a|b"` (DNS labels need no escape)."""
    names = names_of(namespaces) or ["-"]  # "-" is no namespace's name: a matcher that matches nothing
    return f"{label}={json.dumps(names[0])}" if len(names) == 1 else f'{label}=~"{"|".join(names)}"'


class PrometheusError(Exception):
    """Prometheus did not answer, or not with a vector: no data this time."""


def query_for(namespaces: Namespaces) -> str:
    """The PromQL: both series of every device in the namespaces, under either spelling of its label."""
    names = f'__name__=~"{PROFILING}|{METRIC}"'
    return f"{{{names},{matcher('namespace', namespaces)}}} or {{{names},{matcher('exported_namespace', namespaces)}}}"


def ask(base_url: str, namespaces: Namespaces, timeout: float, also: str = "") -> list[Mapping[str, Any]]:
    """The query's result vector (with `also`'s series, another PromQL expression joined by `or`, in the same
    answer); PrometheusError when there is none in time."""
    query = query_for(namespaces) + (f" or {also}" if also else "")
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with _DIRECT.open(url, timeout=timeout) as answer:
            body = json.loads(answer.read(8 * 1024 * 1024))
    except (OSError, ValueError) as error:
        raise PrometheusError(f"Prometheus at {base_url} did not answer: {error}") from error
    # {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {...}, "value": [t, "42"]}]}}
    data = body.get("data") if isinstance(body, dict) and body.get("status") == "success" else None
    if not isinstance(data, dict) or data.get("resultType") != "vector" or not isinstance(data.get("result"), list):
        raise PrometheusError(f"Prometheus at {base_url} answered without a vector")
    return list(data["result"])


def readings(
    result: Sequence[Mapping[str, Any]], namespaces: Namespaces
) -> Iterator[tuple[Mapping[str, Any], str, float]]:
    """Each readable series of the answer whose pod is in one of the namespaces: (its labels, its pod, its finite
    value), under either spelling of the pod and namespace labels. Gridlane's pods are named after their workload's
    Job, so a pod's name is its key whichever namespace it is in."""
    within = set(names_of(namespaces))
    for series in result:
        metric = series.get("metric") if isinstance(series, Mapping) else None
        value = series.get("value") if isinstance(series, Mapping) else None
        if not isinstance(metric, Mapping) or not isinstance(value, list) or len(value) != 2:
            continue
        pod = metric.get("exported_pod") or metric.get("pod")
        if not pod or (metric.get("exported_namespace") or metric.get("namespace")) not in within:
            continue
        try:
            number = float(value[1])
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            yield metric, str(pod), number


def by_pod(result: Sequence[Mapping[str, Any]], namespaces: Namespaces) -> dict[str, float]:
    """Mean utilisation (0-100) of each pod's devices in the namespaces, each by its profiling series where it has
    one, else by its coarse one; series that cannot be read are left out."""
    profiled: dict[tuple[str, ...], float] = {}
    coarse: dict[tuple[str, ...], float] = {}
    for metric, pod, number in readings(result, namespaces):
        if OTHER in metric:
            continue  # another series of the same answer (fabrics.kubernetes.cadvisor's CPU)
        is_profiled = metric.get("__name__") == PROFILING
        utilisation = number * (100 if is_profiled else 1)
        if not 0 <= utilisation <= 100:
            continue
        device = (pod, str(metric.get("Hostname", "")), str(metric.get("gpu", "")), str(metric.get("GPU_I_ID", "")))
        (profiled if is_profiled else coarse).setdefault(device, utilisation)
    seen: defaultdict[str, list[float]] = defaultdict(list)
    for (pod_name, *_), share in (coarse | profiled).items():  # a device's profiling series wins
        seen[pod_name].append(share)
    return {pod: sum(values) / len(values) for pod, values in seen.items()}


def of_job(utilisation: Mapping[str, float], pods: Sequence[str]) -> float | None:
    """A job's GPU utilisation: the mean over its pods that report (None when none does)."""
    known = [utilisation[p] for p in pods if p in utilisation]
    return sum(known) / len(known) if known else None
