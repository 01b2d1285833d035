"""Native PBS jobs sampled by the agent on their node (fabrics.agent.pbs_jobs): `POST /api/v1/agent/pbs-jobs/usage/`
with {"host": its name, "jobs": {PBS job id: [readings]}}.

A PBS whose qsub is not Slurm's cannot have Gridlane's sampler join a running job (fabrics.pbs.sampling); the
agent IT runs on its nodes reads the jobs there instead. A job's readings are kept as its workload's where a
running workload of a PBS fabric has that job id and runs on the agent's host (its first execution host, as PBS
reports it; the agent's name, or its name up to the first dot), and that PBS fabric names the agent's fabric as
the one whose agents run on its nodes (its setting `agent_fabric`, IT's: no other agent speaks for its jobs);
any other job id is answered as unknown and kept nowhere. The workload's sampler is then marked started (its
reason, which named the missing agent, goes).
Three queries whatever the number of jobs: the host, the workloads, the write (and one update of their starts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db.models import Q
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from portal.agents import fields, services
from portal.agents.views import _body, _fabric, _host
from portal.usage.models import SamplerStart, UsageSample
from portal.workloads.models import Workload
from portal.workloads.states import State

FIELDS = frozenset({"host", "jobs"})
MAX_JOBS = 256
MAX_ID = 200  # characters of a PBS job id ("1234.server.example.org")


def _jobs(body: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    jobs = body.get("jobs", {})
    if not isinstance(jobs, Mapping) or len(jobs) > MAX_JOBS:
        raise ValidationError({"jobs": [f"Give an object of at most {MAX_JOBS} job ids to lists of readings."]})
    for job_id, readings in jobs.items():
        if len(job_id) > MAX_ID or not isinstance(readings, list) or not all(isinstance(r, dict) for r in readings):
            raise ValidationError({"jobs": [f"{job_id[:MAX_ID]}: give a list of readings."]})
        unknown = fields.item_errors(readings, fields.SAMPLE)
        if unknown:
            raise ValidationError({"jobs": {job_id[:MAX_ID]: unknown}})
    return dict(jobs)


def workloads_on(agents: str, host: str, job_ids: list[str]) -> dict[str, Workload]:
    """The running workloads with these job ids on this host of the PBS fabrics whose nodes run the agents of the
    agent fabric named `agents` (their setting `agent_fabric`), by job id: one query."""
    short = host.split(".", 1)[0]
    found = Workload.objects.filter(
        state=State.RUNNING, fabric__kind="pbs", fabric__settings__agent_fabric=agents, external_id__in=job_ids
    ).filter(Q(host=host) | Q(host=short))
    return {w.external_id: w for w in found.only("pk", "external_id", "gpus_milli", "attempt")}


@extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
@api_view(["POST"])
def usage(request: Request) -> Response:
    fabric = _fabric(request)
    body = _body(request, FIELDS)
    jobs = _jobs(body)
    host = _host(request, fabric)
    mine = workloads_on(fabric.name, host.name, list(jobs)) if jobs else {}
    rows: list[UsageSample] = []
    try:
        for job_id, w in mine.items():
            rows += services.usage_rows(w.pk, w.gpus_milli, jobs[job_id])
    except (TypeError, ValueError) as error:
        raise ValidationError({"jobs": [str(error)]}) from error
    UsageSample.objects.bulk_create(rows)
    if mine:
        SamplerStart.objects.filter(workload_id__in=[w.pk for w in mine.values()], started=False).update(
            started=True, reason="", retry_at=None
        )
    return Response({"recorded": len(rows), "unknown": sorted(set(jobs) - set(mine))})
