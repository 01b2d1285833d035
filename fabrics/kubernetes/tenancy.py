"""A namespace per team: what Gridlane creates so each team's work runs apart (pure rendering).

On a fabric whose settings name a `namespace_pattern` ("gl-{team}"), each team's Jobs go to its own namespace:

    Namespace       gl-<team>      labelled managed-by gridlane, gridlane.io/team, and Pod Security's
                                   `pod-security.kubernetes.io/enforce: restricted` (IT may choose `baseline`),
                                   with `enforce-version: latest`
    ServiceAccount  gridlane-job   the team's pods run as it; no Role or RoleBinding names it, so it has no API
                                   rights, and its token is not mounted (automountServiceAccountToken false)
    ResourceQuota   gridlane       the requests of the team's limit on this fabric: a second line of
                                   defence behind Gridlane's own admission (absent when the team has no limit)
    LocalQueue      gl-<team>      on a Kueue-owned fabric, in the team's namespace (fabrics/kubernetes/kueue.py)

Without a pattern, every Job runs in the fabric's one namespace as before: IT switches a fabric by setting the
pattern (docs/kubernetes.md). A team slug becomes a DNS label (kueue.dns_name), so two slugs never share one.
"""

from __future__ import annotations

from typing import Any

from fabrics.kubernetes.identity import SERVICE_ACCOUNT
from fabrics.kubernetes.kueue import TEAM_LABEL, Limits, dns_name
from fabrics.kubernetes.render import MANAGED_BY
from fabrics.kubernetes.settings import KubeSettings

QUOTA = "gridlane"
ENFORCE = "pod-security.kubernetes.io/enforce"


def namespace_for(settings: KubeSettings, team: str, default: str) -> str:
    """The team's namespace; `default` (the fabric's) without a pattern."""
    if not settings.namespace_pattern:
        return default
    return dns_name(settings.namespace_pattern.replace("{team}", dns_name(team)))


def objects(settings: KubeSettings, team: str, namespace: str, limit: Limits | None = None) -> list[dict[str, Any]]:
    """The team's Namespace, ServiceAccount and (with a limit) ResourceQuota, in the order they are created."""
    labels = {MANAGED_BY: "gridlane", TEAM_LABEL: team}
    made: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": namespace,
                "labels": labels | {ENFORCE: settings.pod_security, f"{ENFORCE}-version": "latest"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace, "labels": labels},
            "automountServiceAccountToken": False,
        },
    ]
    hard = _hard(settings, limit or Limits())
    if hard:
        quota = {"name": QUOTA, "namespace": namespace, "labels": labels}
        made.append({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": quota, "spec": {"hard": hard}})
    return made


def _hard(settings: KubeSettings, limit: Limits) -> dict[str, str]:
    """The limit as quota: GPUs in whole units of the fabric's resource, CPUs in millicores, memory in MiB."""
    hard: dict[str, str] = {}
    if limit.gpus_milli is not None:
        units = str(limit.gpus_milli // settings.gpu.milli_per_unit)
        hard[f"requests.{settings.gpu.name}"] = units
    # Requests only: a quota on limits would refuse every pod that sets none.
    if limit.cpus_milli is not None:
        hard["requests.cpu"] = f"{limit.cpus_milli}m"
    if limit.memory_mib is not None:
        hard["requests.memory"] = f"{limit.memory_mib}Mi"
    return hard
