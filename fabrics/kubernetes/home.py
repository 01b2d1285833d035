"""A notebook's home that stays: the person's own PersistentVolumeClaim, mounted where Slurm and agent notebooks
find the home folder. Pure.

On a fabric whose settings name `home_storage_class`, a notebook's pod mounts the claim `gl-home-<user>` (the
person's POSIX user where the fabric maps people, else their Gridlane name) at `home_path` ("/home/{user}"), with
HOME set to it and the notebook working there. The claim is made on the person's first notebook from the class
and `home_size`, belongs to no Job (so nothing Gridlane deletes takes it with it), and is kept across sessions;
IT deletes it. In a namespace per team, each team's namespace holds the person's claim for that team's work.
"""

from __future__ import annotations

from typing import Any

from fabrics.base import JobSpec
from fabrics.kubernetes.kueue import TEAM_LABEL, dns_name
from fabrics.kubernetes.render import MANAGED_BY, label_value
from fabrics.kubernetes.settings import KubeSettings

VOLUME = "gridlane-home"
OWNER_LABEL = "gridlane.io/owner"


def wanted(job: JobSpec, settings: KubeSettings) -> bool:
    return job.kind == "notebook" and bool(settings.home_storage_class) and not job.script


def user(job: JobSpec) -> str:
    return job.run_as or label_value(job.owner) or "user"


def claim_name(job: JobSpec) -> str:
    return dns_name("gl-home", user(job))


def path(job: JobSpec, settings: KubeSettings) -> str:
    return settings.home_path.replace("{user}", user(job))


def claim(job: JobSpec, settings: KubeSettings, namespace: str) -> dict[str, Any]:
    """The person's claim, as made on first use."""
    labels = {MANAGED_BY: "gridlane", OWNER_LABEL: label_value(user(job)), TEAM_LABEL: label_value(job.group)}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim_name(job), "namespace": namespace, "labels": labels},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": settings.home_storage_class,
            "resources": {"requests": {"storage": settings.home_size}},
        },
    }


def mount(pod: dict[str, Any], main: dict[str, Any], job: JobSpec, settings: KubeSettings) -> None:
    """Mount the claim at the home path in the main container (in place), HOME there and the notebook in it."""
    home = path(job, settings)
    pod["volumes"] = [
        *(pod.get("volumes") or []),
        {"name": VOLUME, "persistentVolumeClaim": {"claimName": claim_name(job)}},
    ]
    main["volumeMounts"] = [*(main.get("volumeMounts") or []), {"name": VOLUME, "mountPath": home}]
    main["env"] = [e for e in main.get("env") or [] if e.get("name") != "HOME"] + [{"name": "HOME", "value": home}]
    main.setdefault("workingDir", home)
