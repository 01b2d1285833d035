"""Who a pod runs as, and the security context every pod Gridlane creates carries (Pod Security "restricted").

The person's POSIX user is the portal's run-as mapping (`JobSpec.run_as`, portal/accounts/posix.py); on
Kubernetes it becomes numbers: the fabric's `posix_ids` setting ({"alice": {"uid": 2001, "gid": 2001}}) or,
without an entry, the portal host's own user database (NSS: the directory the cluster's storage also uses). A
user it cannot find, or one whose uid is below `min_uid`, is refused. Without a mapping (run_as ""), the pod
runs as its image's user, which must not be root.

Every pod: runAsNonRoot, seccompProfile RuntimeDefault, no service-account token mounted, and (a person mapped)
runAsUser, runAsGroup and fsGroup, at the pod and on every container (a container's own would win). Every
container: allowPrivilegeEscalation false and capabilities dropped, unless the queue target allowed privileges.
"""

from __future__ import annotations

import pwd
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fabrics.base import TemplateError
from fabrics.kubernetes.settings import KubeSettings

SERVICE_ACCOUNT = "gridlane-job"  # a team's pods' own, in its namespace (tenancy.py): no API rights


def service_account(settings: KubeSettings) -> str:
    """The ServiceAccount a team's pods run as; "" in the one-namespace mode (the namespace's default)."""
    return SERVICE_ACCOUNT if settings.namespace_pattern else ""


@dataclass(frozen=True)
class Ids:
    uid: int
    gid: int


def ids(run_as: str, settings: KubeSettings) -> Ids | None:
    """The numbers of the person's POSIX user; None without a mapping; TemplateError when they cannot run here."""
    if not run_as:
        return None
    given = {user: Ids(uid, gid) for user, uid, gid in settings.posix_ids}
    found = given.get(run_as)
    if found is None:
        try:
            entry = pwd.getpwnam(run_as)
        except KeyError:
            raise TemplateError(
                f"the POSIX user {run_as!r} is neither in the fabric's posix_ids nor known to the portal's host"
            ) from None
        found = Ids(entry.pw_uid, entry.pw_gid)
    if found.uid < settings.min_uid or found.gid == 0:
        raise TemplateError(f"the POSIX user {run_as!r} has uid {found.uid}, below {settings.min_uid}: it runs nothing")
    return found


def harden(
    pod: dict[str, Any], person: Ids | None, service_account: str = "", allowed: frozenset[str] = frozenset()
) -> None:
    """Give the pod spec the security context above (in place); `allowed`: the target's exceptions (policy.py)."""
    context = pod.setdefault("securityContext", {})
    if "runAsRoot" not in allowed:
        context["runAsNonRoot"] = True
    context.setdefault("seccompProfile", {"type": "RuntimeDefault"})
    if person is not None:
        context |= {"runAsUser": person.uid, "runAsGroup": person.gid, "fsGroup": person.gid}
    if "automountServiceAccountToken" not in allowed:
        pod["automountServiceAccountToken"] = False
    if service_account and "serviceAccountName" not in allowed:
        pod["serviceAccountName"] = service_account
        pod.pop("serviceAccount", None)
    for container in [*(pod.get("initContainers") or []), *(pod.get("containers") or [])]:
        _container(container, person, allowed)


def _container(container: dict[str, Any], person: Ids | None, allowed: frozenset[str]) -> None:
    context = container.setdefault("securityContext", {})
    if person is not None:
        context |= {"runAsUser": person.uid, "runAsGroup": person.gid}
    if "runAsRoot" not in allowed:
        context["runAsNonRoot"] = True
    if not context.get("privileged"):
        context.setdefault("allowPrivilegeEscalation", False)
    capabilities: Mapping[str, Any] = context.get("capabilities") or {}
    if not capabilities.get("add"):
        context["capabilities"] = {"drop": ["ALL"]}
