"""The cluster side of tenancy and references: putting a team's objects in place, and checking what a user's Job
names is its team's. The one place these touch the API (tenancy.py and policy.py stay pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fabrics.base import FabricError
from fabrics.kubernetes import policy, render
from fabrics.kubernetes.client import KubeClient, KubeError

PLURAL = {"Namespace": "namespaces", "ServiceAccount": "serviceaccounts", "ResourceQuota": "resourcequotas"}


def put(client: KubeClient, body: dict[str, Any]) -> list[str]:
    """Create a team's object; one that exists gets its labels and spec put back (a ServiceAccount is left as it
    is). ["Kind name"] when it was made."""
    kind, meta = body["kind"], body["metadata"]
    try:
        client.create_core(PLURAL[kind], body)
    except KubeError as error:
        if error.reason != "AlreadyExists":
            raise
        if kind != "ServiceAccount":
            patch = {"metadata": {"labels": meta["labels"]}} | ({"spec": body["spec"]} if "spec" in body else {})
            where = (PLURAL[kind], meta.get("namespace", ""), meta["name"])
            now = client.patch_core(*where, patch)
            # A merge patch keeps keys it does not name: a quota no longer limited on a resource drops it.
            gone = set((now.get("spec") or {}).get("hard") or {}) - set((body.get("spec") or {}).get("hard") or {})
            if gone:
                client.patch_core(*where, {"spec": {"hard": dict.fromkeys(gone)}})
        return []
    return [f"{kind} {meta['name']}"]


def keep(client: KubeClient, body: dict[str, Any]) -> bool:
    """Create the object unless one of its name exists (a person's home claim); True when it was made."""
    try:
        client.create_core(body["kind"].lower() + "s", body)
    except KubeError as error:
        if error.reason != "AlreadyExists":
            raise
        return False
    return True


def check_references(client: KubeClient, team: str, job: Mapping[str, Any]) -> None:
    """FabricError (not retryable) naming the first Secret, ConfigMap or claim the Job names that is not in its
    namespace labelled gridlane.io/team: <its team> (policy.py)."""
    namespace = job["metadata"].get("namespace") or client.namespace
    value = render.label_value(team)
    for ref in policy.references(job["spec"]["template"]["spec"]):
        try:
            found = client.read(ref.kind, ref.name, namespace)
        except KubeError as error:
            if error.code != 404:
                raise
            found = {}
        if ((found.get("metadata") or {}).get("labels") or {}).get(policy.TEAM_LABEL) != value:
            raise FabricError(
                f"{ref.field}: {ref.name!r} is not a {ref.kind[:-1]} of team {team} in {namespace} "
                f"(one labelled {policy.TEAM_LABEL}: {value})",
                retryable=False,
            )
