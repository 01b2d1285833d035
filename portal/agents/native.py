"""Native PBS jobs sampled by the agent on each of their nodes (fabrics.agent.pbs_jobs):
`POST /api/v1/agent/pbs-jobs/usage/` with {"host": its name, "jobs": {PBS job id: [readings]}}.

A PBS whose qsub is not Slurm's cannot have Gridlane's sampler join a running job (fabrics.pbs.sampling); the
agent IT runs on its nodes reads the jobs there instead. A job's readings are kept as its workload's where a
running workload of a PBS fabric has that job id and runs on the agent's host (one of its execution hosts, as PBS
reports them: `Workload.host`, a node list; the agent's name or its name up to the first dot, against each host's
name or short name, in any case), and that PBS fabric names the agent's fabric as the one whose agents run on its
nodes (its setting `agent_fabric`, IT's: no other agent speaks for its jobs); any other job id is answered as
unknown and kept nowhere. So every node's agent of a multi-node job speaks for its own node.

A reading gives the job's GPUs on the node one by one (`gpus`: index, utilisation or null where the GPU reads
none, as a MIG instance may, memory in use) beside its CPU share. It is kept as a job's sampler's is
(portal.usage.samples.insert): a UsageSample naming the node (the job's host, short name) with how many of its GPUs
read idle, a UsageGpuSample per GPU and their five-minute sums; the node's turn (UsageTurn) says the node
reported, which the efficiency page reads to name the nodes that have not. An agent of an earlier version sends
the job's GPUs averaged (`gpu_utilisation`, `gpu_memory_mib`, no `gpus`): kept as said, without per-GPU rows or
idle counts. The workload's sampler is then marked started (its reason, which named the missing agent, goes).

Bounded whatever the number of jobs: the host, the workloads (one query by job id; the host test in Python), the
samples, their GPUs (with their sums: one statement on PostgreSQL), the turns, and one update of the starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from fabrics import hostlist
from fabrics.sampler import MAX_GPUS, MAX_MEMORY_MIB, MAX_READINGS, Reading
from portal.agents import fields, services
from portal.agents.views import _body, _fabric, _host
from portal.usage import samples
from portal.usage.models import SamplerStart, UsageSample, UsageTurn
from portal.workloads.models import Workload
from portal.workloads.states import State

FIELDS = frozenset({"host", "jobs"})
MAX_JOBS = 256
MAX_ID = 200  # characters of a PBS job id ("1234.server.example.org")
GPUS_SAID = 'A list of at most {} GPUs: {{"index": 0, "utilisation": 0-100 or null, "memory_mib": MiB or null}}.'


def gpus_of(value: Any) -> list[Reading] | None:
    """A reading's `gpus`, one Reading each (None where it gives none: an agent of an earlier version); ValueError
    saying what is wrong (an unknown field, an index twice, a number out of range)."""
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_GPUS or not all(isinstance(g, Mapping) for g in value):
        raise ValueError(GPUS_SAID.format(MAX_GPUS))
    found: list[Reading] = []
    for n, gpu in enumerate(value):
        unknown = sorted(set(gpu) - fields.GPU, key=str)
        if unknown:
            raise ValueError(f"GPU {n}: unknown field {str(unknown[0])[:50]}.")
        index, utilisation, memory = gpu.get("index"), gpu.get("utilisation"), gpu.get("memory_mib")
        if not _number(index, MAX_GPUS - 1, whole=True) or any(r.index == index for r in found):
            raise ValueError(f"GPU {n}: index, each GPU's once, from 0 to {MAX_GPUS - 1}.")
        if utilisation is not None and not _number(utilisation, 100):
            raise ValueError(f"GPU {n}: utilisation, 0 to 100, or null where it reads none.")
        if memory is not None and not _number(memory, MAX_MEMORY_MIB, whole=True):
            raise ValueError(f"GPU {n}: memory_mib, 0 to {MAX_MEMORY_MIB}, or null.")
        found.append(Reading(index, None if utilisation is None else round(utilisation), memory))
    return found


def _number(value: Any, high: float, whole: bool = False) -> bool:
    kinds = int if whole else (int, float)
    return not isinstance(value, bool) and isinstance(value, kinds) and 0 <= value <= high


def _jobs(body: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    jobs = body.get("jobs", {})
    if not isinstance(jobs, Mapping) or len(jobs) > MAX_JOBS:
        raise ValidationError({"jobs": [f"Give an object of at most {MAX_JOBS} job ids to lists of readings."]})
    for job_id, readings in jobs.items():
        if (
            len(job_id) > MAX_ID
            or not isinstance(readings, list)
            or len(readings) > MAX_READINGS
            or not all(isinstance(r, dict) for r in readings)
        ):
            raise ValidationError({"jobs": [f"{job_id[:MAX_ID]}: give a list of at most {MAX_READINGS} readings."]})
        unknown = fields.item_errors(readings, fields.PBS_SAMPLE)
        if unknown:
            raise ValidationError({"jobs": {job_id[:MAX_ID]: unknown}})
        for n, reading in enumerate(readings):
            try:
                gpus_of(reading.get("gpus"))
            except ValueError as error:
                raise ValidationError({"jobs": {job_id[:MAX_ID]: {str(n): {"gpus": [str(error)]}}}}) from error
    return dict(jobs)


def on_host(hosts: str, agent: str) -> str:
    """The node the agent `agent` is among the job's `hosts` (a node list), as the samples name it (the job's
    spelling, short name); "" where it is none of them. A name matches in full or up to its first dot, either
    way round, in any case: the agent "gpu-7.cluster.org" is PBS's "gpu-7", and the agent "gpu-7" PBS's
    "GPU-7.cluster.org"; "gpu-7.other.org" is not "gpu-7.cluster.org"."""
    mine = agent.lower().rstrip(".")
    for name in hostlist.expand(hosts):
        theirs = name.lower().rstrip(".")
        if theirs in (mine, hostlist.short(mine)) or hostlist.short(theirs) == mine:
            return name.split(".", 1)[0][: UsageSample._meta.get_field("node").max_length or 64]
    return ""


def workloads_on(agents: str, host: str, job_ids: list[str]) -> dict[str, tuple[Workload, str]]:
    """The running workloads with these job ids that run on this host (one of their execution hosts), of the PBS
    fabrics whose nodes run the agents of the agent fabric named `agents` (their setting `agent_fabric`), by job
    id, each with the node it is there: one query."""
    found = Workload.objects.filter(
        state=State.RUNNING, fabric__kind="pbs", fabric__settings__agent_fabric=agents, external_id__in=job_ids
    ).only("pk", "external_id", "gpus_milli", "nodes", "host")
    return {w.external_id: (w, node) for w in found if (node := on_host(w.host, host))}


def _kept(reading: dict[str, Any]) -> samples.Kept:
    values, gpus = services.reading(reading), gpus_of(reading.get("gpus"))
    averaged = None if gpus is not None else (values["gpu_utilisation"], values["gpu_memory_mib"])
    return samples.Kept(values["at"], gpus or [], values["cpu_utilisation"], values["memory_mib"], averaged)


@extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
@api_view(["POST"])
def usage(request: Request) -> Response:
    fabric = _fabric(request)
    body = _body(request, FIELDS)
    jobs = _jobs(body)
    host = _host(request, fabric)
    mine = workloads_on(fabric.name, host.name, list(jobs)) if jobs else {}
    try:
        batches = [
            samples.Batch(w.pk, w.gpus_milli * w.nodes, node, [_kept(r) for r in jobs[job_id]])
            for job_id, (w, node) in mine.items()
        ]
    except (TypeError, ValueError) as error:
        raise ValidationError({"jobs": [str(error)]}) from error
    samples.insert(batches, UsageSample.Source.AGENT.value)
    turns = [
        UsageTurn(workload_id=b.workload, node=b.node, last_at=max(k.at for k in b.kept)) for b in batches if b.kept
    ]
    UsageTurn.objects.bulk_create(
        turns, update_conflicts=True, unique_fields=["workload", "node"], update_fields=["last_at"]
    )
    if mine:
        SamplerStart.objects.filter(workload_id__in=[w.pk for w, _ in mine.values()], started=False).update(
            started=True, reason="", retry_at=None
        )
    return Response({"recorded": sum(len(b.kept) for b in batches), "unknown": sorted(set(jobs) - set(mine))})
