"""Taking a waiting Job back for a move (portal/worker/pullback.py): deleted only while it still waits, suspended by
Kueue or with every pod unbound, and no pod of it ever had a node.

The delete carries the Job's resourceVersion as read: Kueue's admission, which unsuspends the Job, between the
read and the delete makes the API server refuse it (409), and the Job runs on. A Job whose pods wait for a node
without Kueue has no such guard against the scheduler binding a pod in between; a pod bound then is deleted with
the Job before its container is likely to have started, and poll, which then reads a host, drops the move. The
caller polls to learn which happened: a Job taken back is gone (poll: missing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from fabrics.kubernetes import parse, render
from fabrics.kubernetes.client import KubeClient, KubeError


def take_back(
    client: KubeClient,
    name: str,
    pods_of: Callable[[Sequence[UUID]], dict[str, list[dict[str, Any]]]],
    *,
    volcano: bool = False,
) -> bool:
    """Delete the Job `name` if it still waits; True when it was deleted."""
    try:
        job = client.read_job(name)
    except KubeError as error:
        if error.code == 404:
            return False
        raise
    meta, st = job.get("metadata") or {}, job.get("status") or {}
    if parse.finished(job) or meta.get("deletionTimestamp") or st.get("succeeded") or st.get("failed"):
        return False
    wid = render.workload_id_of(name)
    pods = pods_of([wid]).get(name, []) if wid is not None else []
    if any((p.get("spec") or {}).get("nodeName") for p in pods):
        return False  # a pod of it has (or had) a node: it started, it stays
    if not client.delete_job_unchanged(name, str(meta.get("resourceVersion", ""))):
        return False
    client.delete("services", name)
    if volcano:
        client.delete("podgroups", name)
    return True
