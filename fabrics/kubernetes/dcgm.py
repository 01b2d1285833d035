"""GPU utilisation of Gridlane's pods from the site's Prometheus, which scrapes NVIDIA's DCGM exporter.

One instant query per sync for the whole namespace, never one per pod: `DCGM_FI_DEV_GPU_UTIL{...}`, one series
per GPU, labelled with the pod and namespace the GPU is allocated to (the exporter's Kubernetes mapping).
Prometheus renames those labels `exported_pod` and `exported_namespace` when its own target labels already use
the names (a scrape through Kubernetes service discovery, without honor_labels): both spellings are read.
A pod with no series has no data (None), never 0 or 100.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

METRIC = "DCGM_FI_DEV_GPU_UTIL"
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class PrometheusError(Exception):
    """Prometheus did not answer, or not with a vector: no data this time."""


def query_for(namespace: str) -> str:
    """The PromQL: every GPU's utilisation in the namespace, under either spelling of its label."""
    quoted = json.dumps(namespace)  # a PromQL string literal is JSON-compatible for these characters
    return f"{METRIC}{{namespace={quoted}}} or {METRIC}{{exported_namespace={quoted}}}"


def ask(base_url: str, namespace: str, timeout: float) -> list[Mapping[str, Any]]:
    """The query's result vector; PrometheusError when there is none in time."""
    url = base_url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": query_for(namespace)})
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


def by_pod(result: Sequence[Mapping[str, Any]], namespace: str) -> dict[str, float]:
    """Mean utilisation (0-100) of each pod's GPUs in the namespace; series that cannot be read are left out."""
    seen: defaultdict[str, list[float]] = defaultdict(list)
    for series in result:
        metric = series.get("metric") if isinstance(series, Mapping) else None
        value = series.get("value") if isinstance(series, Mapping) else None
        if not isinstance(metric, Mapping) or not isinstance(value, list) or len(value) != 2:
            continue
        pod = metric.get("exported_pod") or metric.get("pod")
        where = metric.get("exported_namespace") or metric.get("namespace")
        try:
            utilisation = float(value[1])
        except (TypeError, ValueError):
            continue
        if not pod or where != namespace or not math.isfinite(utilisation) or not 0 <= utilisation <= 100:
            continue
        seen[str(pod)].append(utilisation)
    return {pod: sum(values) / len(values) for pod, values in seen.items()}


def of_job(utilisation: Mapping[str, float], pods: Sequence[str]) -> float | None:
    """A job's GPU utilisation: the mean over its pods that report (None when none does)."""
    known = [utilisation[p] for p in pods if p in utilisation]
    return sum(known) / len(known) if known else None
