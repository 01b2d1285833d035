"""Which nodes of a multi-node job have sent no readings, and why, in words: the efficiency page and `gridlane
stats` name them, so that a job read on some of its nodes does not pass for a job read on all of them.

A job's nodes are the hosts its fabric reports it on (`Workload.host`, a node list: Slurm's, or PBS's execution
hosts, fabrics.hostlist). A node has reported once a reading of it was kept: its turn (UsageTurn, one row per
workload and node, written by a job's sampler, portal.usage.samples, and by a PBS node's agent,
portal.agents.native). Only on Slurm and PBS, whose readings name their node; one query, and none for a job on one
node (its sampler's start, or the lack of any sample, already says why its use is unknown).
"""

from __future__ import annotations

from typing import Any

from fabrics import hostlist
from portal.usage.models import UsageTurn

PER_NODE = frozenset({"slurm", "pbs"})
NAMED = 20  # nodes named at most; the rest are counted


def why(kind: str, agents: str | None) -> str:
    """Why a node of a job on a fabric of `kind` may have sent nothing (`agents`: a PBS fabric's agent_fabric)."""
    if kind == "slurm":
        return "its sampler step sent none from it"
    if not agents:
        return "the PBS fabric names no agent fabric (its setting agent_fabric), so no agent reads its jobs"
    return f"no agent of fabric {agents} with --pbs-jobs has sent any from it"


def unread(w: Any) -> list[str]:
    """The words for each node of the workload that has sent no reading ("no readings from node2: ..."), in the
    order its fabric lists them; [] where every node has, or where nodes are not read one by one. `w` carries its
    fabric's kind and agent fabric as `with_sampler` annotates them."""
    kind = str(getattr(w, "fabric_kind", None) or "")
    nodes = hostlist.expand(w.host or "") if kind in PER_NODE else []
    if len(nodes) < 2:
        return []
    reported = {hostlist.short(n) for n in UsageTurn.objects.filter(workload_id=w.pk).values_list("node", flat=True)}
    silent = [n for n in nodes if hostlist.short(n) not in reported]
    if not silent:
        return []
    reason = why(kind, getattr(w, "agent_fabric", None))
    words = [f"no readings from {n}: {reason}" for n in silent[:NAMED]]
    if len(silent) > NAMED:
        words.append(f"no readings from {len(silent) - NAMED} more of its {len(nodes)} nodes either")
    return words
