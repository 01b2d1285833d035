"""Slurm's words for why a job waits or was refused, in the words Gridlane shows its users. Pure.

A pending job's reason is a code (`squeue -O Reason`: Resources, Priority, QOSMaxGRESPerUser,
"ReqNodeNotAvail, UnavailableNodes:node[01-02]"...). Known codes read as a sentence; the limit
codes (QOS/Assoc, Grp/Max, resource, scope) are read by their parts; anything else is shown as
Slurm said it. The Slurm code follows in brackets, for whoever asks IT.
"""

from __future__ import annotations

import re

PENDING = {
    "None": "",
    "Priority": "Waiting behind jobs with higher priority on the cluster.",
    "Resources": "Waiting for the cluster to free the resources it asks for.",
    "Dependency": "Waiting for the jobs it depends on to finish.",
    "DependencyNeverSatisfied": "It depends on a job that failed, so it can never start.",
    "JobHeldUser": "Held on the cluster by its submitter; it starts once released.",
    "JobHeldAdmin": "Held on the cluster by its administrators.",
    "BeginTime": "Waiting for the start time it was given.",
    "ReqNodeNotAvail": "Waiting: nodes it needs are down, drained or reserved.",
    # 22.05 spells this one out; the comma in it splits like ReqNodeNotAvail's.
    "Nodes required for job are DOWN": (
        "Waiting: nodes it needs are down, drained or kept for jobs of partitions with higher priority."
    ),
    "NodeDown": "Waiting: a node it needs is down.",
    "PartitionDown": "Waiting: the cluster's partition is down.",
    "PartitionInactive": "Waiting: the cluster's partition is inactive.",
    "PartitionNodeLimit": "It asks for more nodes than the cluster's partition allows.",
    "PartitionTimeLimit": "It asks for a longer run time than the cluster's partition allows.",
    "PartitionConfig": "It asks for more than the cluster's partition allows.",
    "BadConstraints": "No node of the cluster can hold what it asks for.",
    "Reservation": "Waiting for its reservation on the cluster to start.",
    "Licenses": "Waiting for software licenses on the cluster.",
    "Cleaning": "Waiting while the cluster cleans up after an earlier run.",
    "Prolog": "Starting: the cluster runs its prolog.",
    "Configuring": "Starting: the cluster prepares its nodes.",
    "InvalidAccount": "The cluster does not know the account it runs under.",
    "InvalidQOS": "The cluster does not accept the QOS it asks for.",
    "FrontEndDown": "Waiting: the cluster's front end is down.",
    "JobArrayTaskLimit": "Waiting: its array runs as many tasks as it may.",
    "launch failed requeued held": "Held by the cluster after a failed launch.",
    "SystemFailure": "Waiting: the cluster reported a failure.",
    "BurstBufferResources": "Waiting for burst buffer space on the cluster.",
    "BurstBufferStageIn": "Waiting while the cluster stages its data in.",
    "MaxRequeue": "Held: the cluster requeued it too often.",
}

_LIMIT = re.compile(
    r"^(?P<who>QOS|Assoc)(?P<kind>Grp|Max|Min)(?P<what>.+?)"
    r"(?P<scope>PerUser|PerAccount|PerJob|PerNode|PerTask)?(?P<tail>RunMinutes|Minutes|Limit)?(?:Limit)?$"
)
_RESOURCES = {
    "Cpu": "CPUs",
    "CPU": "CPUs",
    "GRES": "GPUs",
    "Gres": "GPUs",
    "Mem": "memory",
    "Memory": "memory",
    "Node": "nodes",
    "Jobs": "running jobs",
    "Job": "jobs",
    "SubmitJob": "queued jobs",
    "SubmitJobs": "queued jobs",
    "Submit": "queued jobs",
    "Wall": "run time",
    "WallDuration": "run time",
    "Billing": "billing units",
    "Energy": "energy",
    "License": "licenses",
    "Lic": "licenses",
    "BB": "burst buffer",
    "UnkGRES": "generic resources",
}
_SCOPES = {
    "PerUser": " per user (Gridlane's jobs all count as one user)",
    "PerAccount": " per account",
    "PerJob": " per job",
    "PerNode": " per node",
    "PerTask": " per task",
    None: "",
}

# sbatch's refusals, as users should read them (the rest show as Slurm wrote them).
SUBMIT_ERRORS = {
    "Requested node configuration is not available": (
        "no node of the cluster can ever hold this request (too many GPUs, CPUs or too much memory per node)"
    ),
    "Memory specification can not be satisfied": "no node of the cluster has that much memory",
    "Invalid partition name specified": "the cluster has no such partition",
    "Requested time limit is invalid": "the run time is longer than the cluster's partition allows",
    "More processors requested than permitted": "it asks for more CPUs than the cluster's partition allows",
    "Node count specification invalid": "it asks for more nodes than the cluster's partition allows",
    "Invalid account or account/partition combination specified": (
        "the cluster does not let this job's account (the team's, or its owner's default) use this partition"
    ),
    "Invalid qos specification": "the cluster does not accept the QOS this queue asks for",
    "Job violates accounting/QOS policy": "the request breaks a limit of the cluster's account or QOS",
    "Invalid generic resource (gres) specification": "the cluster has no such GPU type",
}
# Errors after which the job may well be accepted later (or was accepted and the reply lost).
TRANSIENT = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Slurm temporarily unable to accept job",
    "Resource temporarily unavailable",
    "Zero Bytes were transmitted or received",
    "Communication connection failure",
    "Insane message length",
    "Connection refused",
)


def pending(code: str) -> str:
    """Why a job waits, for people; "" when Slurm gives no reason."""
    code = code.strip()
    if not code or code in ("None", "(null)"):
        return ""
    key, _, detail = code.partition(",")  # "ReqNodeNotAvail, UnavailableNodes:vm"
    words = PENDING.get(key) or _limit(key)
    if words is None:
        return f"Waiting on the cluster: {code}."
    detail = detail.strip() if ":" in detail else ""  # "UnavailableNodes:vm", not the rest of a sentence
    suffix = f" [Slurm: {key}{'; ' + detail if detail else ''}]"
    return words + suffix


def _limit(code: str) -> str | None:
    match = _LIMIT.match(code)
    if match is None:
        return None
    what = _RESOURCES.get(match["what"])
    if what is None:
        return None
    who = "QOS" if match["who"] == "QOS" else "account"
    if match["tail"] in ("RunMinutes", "Minutes"):
        what = what.removesuffix("s") + "-minutes"  # GPU-minutes
    if match["kind"] == "Min":
        return f"It asks for fewer {what} than the cluster's {who} requires."
    scope = _SCOPES[match["scope"]]
    if match["kind"] == "Grp":
        return f"Waiting: the cluster's {who} group limit on {what}{scope} is reached."
    if match["scope"] == "PerJob":
        return f"It asks for more {what}{scope} than the cluster's {who} allows."
    return f"Waiting: the cluster's {who} limit on {what}{scope} is reached."


def submit_error(message: str) -> tuple[str, bool]:
    """sbatch's complaint as users should read it, and whether trying again later can help."""
    text = " ".join(message.split())
    retryable = any(word.lower() in text.lower() for word in TRANSIENT) or "submission failed" not in text.lower()
    for slurm_words, ours in SUBMIT_ERRORS.items():
        if slurm_words.lower() in text.lower():
            return f"Slurm refused the job: {ours} ({slurm_words})", retryable
    detail = re.sub(r"^.*?(Batch job submission failed:\s*)", "", text)
    return f"Slurm refused the job: {detail}", retryable
