"""A Kubernetes fabric's settings (Fabric.settings in the admin), checked once and then read as a value.

    {
      "kubeconfig": "/etc/gridlane/kubeconfig",   # absent: the pod's in-cluster service account
      "context": "prod",                          # absent: the kubeconfig's current context
      "namespace": "gridlane",                    # absent: the context's namespace, else "default"
      "gpu_flavor": "h100",                       # the fabric's flavor (Fabric.gpu_flavor)
      "gpu_sharing": true,                        # Fabric.gpu_sharing: fractions share a GPU
      "gpu_resources": {                          # flavor -> extended resource; unlisted flavors:
        "h100": "nvidia.com/gpu",                 #   mig-* -> nvidia.com/mig-*, others -> nvidia.com/gpu
        "t4-shared": {"resource": "nvidia.com/gpu.shared", "milli_per_unit": 250}
      },
      "ttl_seconds_after_finished": 3600,
      "volcano": false, "volcano_queue": "",
      "default_image": "", "capacity": "nodes", "node_selector": "",
      "request_timeout_s": 30,
      "prometheus_url": "http://prometheus.monitoring:9090",  # optional: GPU utilisation from DCGM
      "kueue_owned": false,                       # Gridlane keeps the Kueue queues (see below)
      "kueue_priorities": {"high": 1000},         # WorkloadPriorityClasses to keep (the tiers' class names)
      "topology_levels": ["example.com/block", "example.com/rack", "kubernetes.io/hostname"],  # widest first
      "namespace_pattern": "gl-{team}",           # a namespace per team (absent: every job in `namespace`)
      "pod_security": "restricted",               # the team namespaces' Pod Security level (or "baseline")
      "posix_ids": {"alice": {"uid": 2001, "gid": 2001}},  # the mapped POSIX users' ids (else the portal's NSS)
      "min_uid": 1000,                            # the lowest uid a job may run as
      "home_storage_class": "standard",           # notebooks' own claims (absent: no persistent home)
      "home_size": "20Gi", "home_path": "/home/{user}",
      "reserved_taints": ["nvidia.com/reserved"]  # taints a user's manifest may not tolerate
    }

Kueue-owned (`kueue_owned: true`): the worker keeps a ClusterQueue per team (its reservation and limit here), a
LocalQueue per team in the namespace, and the flavor in step with Gridlane's quotas, and every Job goes to its
team's LocalQueue (created suspended; Kueue admits it). It is Kueue mode by definition, so it cannot go with
Volcano.

Fractional GPUs: Kubernetes counts extended resources in whole units, so a request becomes
`gpus_milli / milli_per_unit` units. Nothing is rounded behind the scheduler's back; what runs is
what the scheduler counted:
  - whole units: 2 GPUs on nvidia.com/gpu -> 2; 0.25 GPU on a flavor whose unit is a quarter
    (`"milli_per_unit": 250`, a time-sliced share or a MIG slice IT counts as a quarter) -> 1;
  - the fabric does not share GPUs (`gpu_sharing: false`, the portal's Fabric.gpu_sharing): the
    scheduler counted a fraction as a whole GPU, so 0.25 renders as one whole GPU;
  - otherwise (GPUs shared, a whole-GPU resource) 0.25 cannot be expressed: it is refused with a
    message saying so, rather than silently given a whole GPU the scheduler did not count.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
KNOWN = frozenset(
    {
        "kubeconfig",
        "context",
        "namespace",
        "gpu_flavor",
        "gpu_sharing",
        "gpu_resources",
        "ttl_seconds_after_finished",
        "volcano",
        "volcano_queue",
        "default_image",
        "capacity",
        "node_selector",
        "request_timeout_s",
        "prometheus_url",
        "kueue_owned",
        "kueue_priorities",
        "topology_levels",
        "namespace_pattern",
        "pod_security",
        "posix_ids",
        "min_uid",
        "home_storage_class",
        "home_size",
        "home_path",
        "reserved_taints",
    }
)
NAMESPACE_PATTERN = re.compile(r"^[a-z0-9-]*\{team\}[a-z0-9-]*$")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class GpuResource:
    """The extended resource a flavor's GPUs are requested as, and how much of a GPU one unit is."""

    name: str = "nvidia.com/gpu"
    milli_per_unit: int = 1000

    def units(self, gpus_milli: int, sharing: bool = True) -> int:
        """Whole units for this many milli-GPUs; ValueError, worded for the submitter, when they do not divide.

        Without sharing, a fraction counts as a whole GPU (as the scheduler counts it) before dividing.
        """
        if not sharing and gpus_milli % 1000:
            gpus_milli = (gpus_milli // 1000 + 1) * 1000
        units, rest = divmod(gpus_milli, self.milli_per_unit)
        if rest == 0:
            return units
        step = _gpus(self.milli_per_unit)
        if self.milli_per_unit == 1000:
            raise ValueError(
                f"{_gpus(gpus_milli)} GPU cannot run here: Kubernetes hands out {self.name} as whole GPUs. "
                "Ask for a whole number of GPUs, or use a queue whose GPUs are shared or MIG slices."
            )
        raise ValueError(
            f"{_gpus(gpus_milli)} GPU cannot run here: this fabric hands out {self.name} in steps of {step} GPU. "
            f"Ask for a multiple of {step}."
        )


@dataclass(frozen=True)
class KubeSettings:
    kubeconfig: str = ""
    context: str = ""
    namespace: str = ""
    gpu: GpuResource = GpuResource()
    gpu_sharing: bool = True
    ttl_s: int = 3600
    volcano: bool = False
    volcano_queue: str = ""
    default_image: str = ""
    capacity: str = "nodes"
    node_selector: str = ""
    request_timeout_s: float = 30.0
    prometheus_url: str = ""  # the site's Prometheus, which scrapes the DCGM exporter (GPU utilisation)
    kueue_owned: bool = False  # Gridlane keeps the cluster's Kueue queues; Jobs go to their team's LocalQueue
    kueue_priorities: tuple[tuple[str, int], ...] = ()
    topology_levels: tuple[str, ...] = ()
    namespace_pattern: str = ""  # "gl-{team}": a namespace per team (tenancy.py); "": the one namespace
    pod_security: str = "restricted"
    posix_ids: tuple[tuple[str, int, int], ...] = ()  # (user, uid, gid)
    min_uid: int = 1000
    home_storage_class: str = ""
    home_size: str = "10Gi"
    home_path: str = "/home/{user}"
    reserved_taints: tuple[str, ...] = ()

    @classmethod
    def parse(cls, settings: Mapping[str, Any]) -> KubeSettings:
        """The settings as a value; ValueError naming the first thing wrong."""
        unknown = set(settings) - KNOWN
        if unknown:
            raise ValueError(f"unknown Kubernetes setting(s): {', '.join(sorted(unknown))}")
        namespace = _text(settings, "namespace")
        if namespace and not DNS_LABEL.match(namespace):
            raise ValueError(f"namespace {namespace!r} is not a Kubernetes namespace name")
        ttl = settings.get("ttl_seconds_after_finished", 3600)
        if not isinstance(ttl, int) or isinstance(ttl, bool) or ttl < 0:
            raise ValueError("ttl_seconds_after_finished must be a whole number of seconds, 0 or more")
        volcano, sharing = settings.get("volcano", False), settings.get("gpu_sharing", True)
        if not isinstance(volcano, bool) or not isinstance(sharing, bool):
            raise ValueError("volcano and gpu_sharing must be true or false")
        kueue_owned = settings.get("kueue_owned", False)
        if not isinstance(kueue_owned, bool):
            raise ValueError("kueue_owned must be true or false")
        if kueue_owned and volcano:
            raise ValueError("kueue_owned and volcano cannot both be on: a Job goes either to Kueue or to Volcano")
        capacity = settings.get("capacity", "nodes")
        if capacity not in ("nodes", "declared"):
            raise ValueError('capacity must be "nodes" (read from the cluster) or "declared" (as entered)')
        timeout = settings.get("request_timeout_s", 30)
        if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 300:
            raise ValueError("request_timeout_s must be a number of seconds between 0 and 300")
        return cls(
            kubeconfig=_text(settings, "kubeconfig"),
            context=_text(settings, "context"),
            namespace=namespace,
            gpu=gpu_resource(_text(settings, "gpu_flavor"), settings.get("gpu_resources", {})),
            gpu_sharing=sharing,
            ttl_s=ttl,
            volcano=volcano,
            volcano_queue=_text(settings, "volcano_queue"),
            default_image=_text(settings, "default_image"),
            capacity=capacity,
            node_selector=_text(settings, "node_selector"),
            request_timeout_s=float(timeout),
            prometheus_url=_prometheus_url(settings),
            kueue_owned=kueue_owned,
            **_tenancy(settings),
        )


def gpu_resource(flavor: str, mapping: Any) -> GpuResource:
    """The flavor's resource from the mapping; mig-* flavors default to their MIG resource name."""
    if not isinstance(mapping, Mapping):
        raise ValueError('gpu_resources maps a flavor to a resource name or {"resource": ..., "milli_per_unit": ...}')
    entry = mapping.get(flavor) if flavor else None
    for name, value in mapping.items():  # check every entry, not just this fabric's
        _entry(str(name), value)
    if entry is not None:
        return _entry(flavor, entry)
    if flavor.startswith("mig-"):
        return GpuResource(f"nvidia.com/{flavor}")
    return GpuResource()


def _entry(flavor: str, value: Any) -> GpuResource:
    if isinstance(value, str):
        value = {"resource": value}
    if not isinstance(value, Mapping) or set(value) - {"resource", "milli_per_unit"}:
        raise ValueError(f'gpu_resources[{flavor!r}] must be a resource name or {{"resource", "milli_per_unit"}}')
    resource, milli = value.get("resource"), value.get("milli_per_unit", 1000)
    if not isinstance(resource, str) or not RESOURCE_NAME.match(resource):
        raise ValueError(
            f"gpu_resources[{flavor!r}]: {resource!r} is not an extended resource name like nvidia.com/gpu"
        )
    if not isinstance(milli, int) or isinstance(milli, bool) or not 1 <= milli <= 1000 or 1000 % milli:
        raise ValueError(
            f"gpu_resources[{flavor!r}].milli_per_unit must divide 1000 (1000: a unit is a whole GPU, 250: a quarter)"
        )
    return GpuResource(resource, milli)


def _text(settings: Mapping[str, Any], key: str) -> str:
    value = settings.get(key, "")
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{key} must be text")
    return value.strip()


def _gpus(milli: int) -> str:
    """Milli-GPUs as a plain decimal: 250 -> "0.25", 2000 -> "2"."""
    return f"{milli // 1000}.{milli % 1000:03d}".rstrip("0").rstrip(".")


def _prometheus_url(settings: Mapping[str, Any]) -> str:
    url = _text(settings, "prometheus_url")
    if url and (urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc):
        raise ValueError("prometheus_url must be the site's Prometheus, http(s)://host:port (its DCGM metrics)")
    return url


def _tenancy(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of tenancy, identity, storage, priorities and topology; ValueError naming the first wrong."""
    priorities = settings.get("kueue_priorities", {})
    if not isinstance(priorities, Mapping) or not all(
        isinstance(k, str) and DNS_LABEL.match(k) and isinstance(v, int) and not isinstance(v, bool)
        for k, v in priorities.items()
    ):
        raise ValueError("kueue_priorities maps a priority class name (a DNS label) to a whole number")
    levels = _labels(settings, "topology_levels")
    pattern = _text(settings, "namespace_pattern")
    if pattern and (not NAMESPACE_PATTERN.match(pattern) or len(pattern) > 40):
        raise ValueError('namespace_pattern holds {team} once in a namespace name, e.g. "gl-{team}"')
    security = settings.get("pod_security", "restricted")
    if security not in ("restricted", "baseline"):
        raise ValueError('pod_security is "restricted" or "baseline"')
    ids = settings.get("posix_ids", {})
    if not isinstance(ids, Mapping) or not all(
        isinstance(v, Mapping) and set(v) == {"uid", "gid"} and all(type(n) is int and n >= 0 for n in v.values())
        for v in ids.values()
    ):
        raise ValueError('posix_ids maps a POSIX user to {"uid": N, "gid": N}')
    min_uid = settings.get("min_uid", 1000)
    if type(min_uid) is not int or min_uid < 1:
        raise ValueError("min_uid is a whole number of at least 1 (uid 0 never runs a job)")
    size = _text(settings, "home_size") or "10Gi"
    if not QUANTITY.match(size):
        raise ValueError('home_size is a storage quantity such as "20Gi"')
    home = _text(settings, "home_path") or "/home/{user}"
    if not home.startswith("/") or "{user}" not in home or ".." in home:
        raise ValueError('home_path is an absolute path holding {user}, e.g. "/home/{user}"')
    return {
        "kueue_priorities": tuple(sorted(priorities.items())),
        "topology_levels": levels,
        "namespace_pattern": pattern,
        "pod_security": security,
        "posix_ids": tuple(sorted((str(k), v["uid"], v["gid"]) for k, v in ids.items())),
        "min_uid": min_uid,
        "home_storage_class": _text(settings, "home_storage_class"),
        "home_size": size,
        "home_path": home,
        "reserved_taints": _labels(settings, "reserved_taints"),
    }


def _labels(settings: Mapping[str, Any], key: str) -> tuple[str, ...]:
    value = settings.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and LABEL_KEY.match(v) for v in value):
        raise ValueError(f"{key} lists label or taint keys, e.g. example.com/rack")
    return tuple(value)
